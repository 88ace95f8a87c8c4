"""``sm120lab roofline``: decode ceiling tok/s of a model on TP x PP GPUs (see sm120lab.roofline).

    sm120lab roofline --model qwen3.5-397b-a17b --gpu rtx-pro-6000 --tp 2 --pp 2 --batch 1 4 16

The default basis is the decision guide's (``--plan checkpoint``): the model's checkpoint counted in
its own FP4/16-bit split, with the cited latency of each all-reduce and pipeline hop over PCIe on
SM12x GPUs, the ceiling ``sm120lab recommend`` and notebook 04 state. ``--plan linear-quantized`` or
``experts-only`` count a named precision plan, bandwidth only. The basis is printed above the numbers.

``fits`` compares weights + KV cache + linear-attention state + activations per GPU with the
GPU's memory. ``--bandwidth measured`` uses our own copy measurement where one exists and says
"datasheet (no measurement)" where it does not.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("roofline", help="decode ceiling tok/s (memory vs compute floor, TP/PP)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="preset name (sm120lab.roofline.PRESETS); default: the GPU's "
                   "default setup, shared with `sm120lab recommend`")
    p.add_argument("--gpu", default="rtx-pro-6000", help="a gpu of data/hardware.csv")
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel size (default: the GPU's default setup)")
    p.add_argument("--pp", type=int, default=None, help="pipeline-parallel size (default: the GPU's default setup)")
    p.add_argument("--batch", type=int, nargs="+", default=None,
                   help="concurrent sequences (default: the default setup's users)")
    p.add_argument("--context", type=int, default=2048, help="past tokens per sequence")
    p.add_argument("--format", default="nvfp4",
                   help="expert weight format of a named --plan: nvfp4 | mxfp4 | fp8 | bf16")
    p.add_argument("--plan", default="checkpoint",
                   help="checkpoint (the guide's basis: the checkpoint's own formats, with all-reduce latency) | "
                        "linear-quantized | experts-only (bandwidth only)")
    p.add_argument("--routing", default="uniform", choices=["uniform", "zipf"])
    p.add_argument("--bandwidth", default="datasheet", choices=["datasheet", "measured"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..roofline import PRECISION_PLANS, get_gpu, get_model
    from ..roofline.basis import plan_basis

    def arg(name, call):
        try:
            return call()
        except ValueError as exc:
            raise SystemExit(f"--{name}: {exc}") from None

    from ..recommend.setup import GPU, resolve_setup

    gpu = arg("gpu", lambda: get_gpu(args.gpu))
    # One default for `recommend` and `roofline`: the SM12x GPU's default setup; other GPUs
    # (h200, b200) take the seed's setup. Explicit arguments override it.
    known = args.gpu in {g.value for g in GPU}
    try:
        setup = resolve_setup(args.gpu if known else "rtx-pro-6000", model=args.model, tp=args.tp, pp=args.pp)
    except ValueError as exc:
        raise SystemExit(f"--{exc}") from None
    args.model, args.tp, args.pp = setup.model, setup.tp, setup.pp
    if args.batch is None:
        args.batch = [setup.users]
    model = arg("model", lambda: get_model(args.model))
    if args.plan not in ("checkpoint", *PRECISION_PLANS):
        raise SystemExit(f"--plan: expected checkpoint, {', '.join(PRECISION_PLANS)}, got {args.plan!r}")
    if args.plan == "checkpoint":
        from ..recommend.facts import guide_basis

        if args.format != "nvfp4":
            raise SystemExit(f"--format: applies to a named --plan only (checkpoint reads the checkpoint's own "
                             f"formats), got {args.format!r}")
        basis = guide_basis()
        arg("model", lambda: basis.precision_for(model))
    else:
        basis = arg("format", lambda: plan_basis(args.plan, args.format))
    for name in ("tp", "pp", "context"):
        if getattr(args, name) < (0 if name == "context" else 1):
            raise SystemExit(f"--{name}: expected {'>= 0' if name == 'context' else 'a positive int'}, "
                             f"got {getattr(args, name)}")
    if any(b < 1 for b in args.batch):
        raise SystemExit(f"--batch: expected positive ints, got {args.batch}")
    rows = [arg("tp/--pp", lambda b=b: basis.ceiling(model, gpu, tp=args.tp, pp=args.pp, batch=b,
                                                     context=args.context, routing=args.routing,
                                                     bandwidth=args.bandwidth)) for b in args.batch]
    first = rows[0]
    print(f"{model.name} on {args.tp * args.pp}x {gpu.gpu} (TP{args.tp} PP{args.pp}), context {args.context}, "
          f"{args.routing} routing")
    lat = basis.latency_us(gpu, args.tp * args.pp)
    print(f"basis: {basis.label_for(gpu, args.tp * args.pp)}"
          + (f" ({lat:g} us per all-reduce and pipeline hop)" if lat else ""))
    print(f"memory bandwidth: {first.bandwidth_GBps:g} GB/s, {first.bandwidth_source}; memory: {gpu.mem_GB:g} GB per GPU")
    print(f"{'B':>5} {'per-user tok/s':>15} {'aggregate tok/s':>16} {'bound':>8} {'GB/GPU/step':>12} "
          f"{'GB/GPU held':>12} {'fits':>5}")
    for c in rows:
        print(f"{c.batch:>5g} {c.per_user_tok_s:>15.1f} {c.aggregate_tok_s:>16.1f} {c.bound:>8} "
              f"{c.bytes_per_gpu / 1e9:>12.2f} {c.memory_per_gpu_GB:>12.2f} {'yes' if c.fits else 'NO':>5}")
    if not all(c.fits for c in rows):
        print(f"NO: weights + KV cache + linear state + activations exceed {gpu.mem_GB:g} GB per GPU "
              "(lower --batch or --context, or add GPUs)")
    return 0
