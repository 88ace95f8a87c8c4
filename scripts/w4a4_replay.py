"""Replay one W4A4 check of the bench stage by stage: which stage first departs from ``emulated-w4a4``?

    PYTHONPATH=. python3 scripts/w4a4_replay.py [--seed 1837863647] [--preset small] [--tokens 96]
        [--routing uniform] [--device cuda] [--out OUT.json]

The bench's check (``sm120lab.bench.moe.check_layer``) draws ``make_moe_problem(preset, tokens, routing,
seed, device)`` and compares ``fused_moe_nvfp4(mode="w4a4")`` with ``emulated-w4a4`` on the whole output.
On the H200 run of 2026-12-03 (``data/bench/moe_h200_2026-12-03_qwen3-next-80b-a3b_round6.json``) that case
was rel 0.163 at seed 1837863647 (drawn by the GPU's generator: replay it on a CUDA machine). This script
runs the kernel path with its stage buffers (``_trace``) and the emulation with its per-slot intermediate,
and reports per stage:

1. ``a1``: the hidden states' NVFP4 codes and scales from the Triton quantizer vs ``quantize_nvfp4``;
2. ``inter``: the kernel's bf16 SiLU(gate)*up per slot vs the emulation's intermediate rounded to bf16
   (elements that differ, largest difference in bf16 ulps);
3. ``a2``: the Triton quantizer on the kernel's own intermediate vs ``quantize_nvfp4`` on the same bf16
   values (the quantizer alone), and vs the emulation's intermediate (what stage 2 propagates);
4. ``out``: per-slot outputs (``out_slots`` / routing weight) vs the emulation's per-slot outputs, and the
   whole output, with the worst slots and their experts.

On the CPU it runs the kernels under Triton's interpreter (slow; the GPU's draw cannot be made there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1837863647)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--routing", default="uniform")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--out", default=None, help="also write the report here (JSON)")
    ap.add_argument("--repeat", type=int, default=4, help="run the kernel path this many times: do outputs agree bit for bit?")
    ap.add_argument("--sweep", type=int, default=0,
                    help="also run the bench's whole-output check (bench.moe.w4a4_vs_emulated) on this many further seeds")
    return ap.parse_args()


def _differ(codes, scales, q) -> dict:
    """Codes and E4M3 scale bytes of a kernel's quantization that differ from ``q`` (``quantize_nvfp4``)."""
    import torch

    return {"codes_differ": int((codes != q.data).sum()),
            "scales_differ": int((scales != q.linear_scale().view(torch.uint8)).sum())}


def _quantizer_ptx_facts() -> list[dict]:
    """Approximate fp32 divisions and fp32 fma in the PTX of each compiled activation quantizer of this process
    (both must be 0 for bit-exactness, :func:`sm120lab.archflags.kernel_aot.compile_quant`)."""
    from sm120lab.archflags.kernel_aot import division_facts
    from sm120lab.kernels.nvfp4_tl import nvfp4_quantize_rows_kernel as fn

    caches = getattr(fn, "device_caches", {})  # a compiled kernel's cache (not under the interpreter)
    return [{**division_facts(k.asm["ptx"]), "n_div_rn_f32": k.asm["ptx"].count("div.rn.f32")}
            for cache in caches.values() for k in cache[0].values()]


def main() -> int:
    args = _parse()
    import torch

    dev = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    from sm120lab.kernels.moe_layer import fused_moe_nvfp4
    from sm120lab.moe.backends.emulated_w4a4 import nvfp4_round_trip
    from sm120lab.moe.grouping import group_by_expert, grouped_moe_forward
    from sm120lab.moe.problem import make_moe_problem
    from sm120lab.moe.reference import dequantize_expert
    from sm120lab.nvfp4 import quantize_nvfp4
    from sm120lab.nvfp4.quant_error import relative_error

    try:
        p = make_moe_problem(args.preset, tokens=args.tokens, routing=args.routing, seed=args.seed, device=dev)
    except (ValueError, TypeError) as exc:
        print(f"w4a4_replay: {exc}", file=sys.stderr)
        return 2
    t, k = p.topk_ids.shape
    trace: dict = {}
    out = fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, mode="w4a4", a1_gscale=p.a1_gscale,
                          a2_gscale=p.a2_gscale, _poison=True, _trace=trace)
    from sm120lab.cmdline import command_line
    from sm120lab.envinfo import collect

    rep: dict = {"env": collect(), "command": command_line("scripts/w4a4_replay.py", sys.argv[1:]),
                 "problem": {"preset": args.preset, "tokens": args.tokens, "routing": args.routing, "seed": args.seed,
                             "device": dev}, "plan": trace["plan"].as_dict()}
    again = [fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, mode="w4a4", a1_gscale=p.a1_gscale,
                             a2_gscale=p.a2_gscale, _poison=True) for _ in range(max(args.repeat - 1, 0))]
    rep["repeat"] = {"runs": 1 + len(again), "bit_equal": all(torch.equal(out.view(torch.int16), a.view(torch.int16))
                                                              for a in again)}

    # 1. the hidden states' quantization
    rep["a1"] = _differ(trace["a1"], trace["a1_scales"], quantize_nvfp4(p.hidden.float(), p.a1_gscale))

    # 2. the intermediate, per slot (the emulation's groups follow the stable sort of the flat ids)
    seen = []

    def act_quant(a):
        seen.append(a.detach().clone())
        return nvfp4_round_trip(a.to(torch.bfloat16), p.a2_gscale)

    x_hat = nvfp4_round_trip(p.hidden, p.a1_gscale)
    emu_slots = grouped_moe_forward(x_hat, p.topk_ids, None, p.config.E,
                                    lambda e: dequantize_expert(p.w13, e, torch.float32),
                                    lambda e: dequantize_expert(p.w2, e, torch.float32),
                                    act_quant=act_quant, per_slot=True).reshape(t * k, -1)
    order = group_by_expert(p.topk_ids, p.config.E).order
    inter_emu = torch.empty(t * k, p.config.I, dtype=torch.float32, device=dev)
    inter_emu[order] = torch.cat(seen)
    inter_emu_bf = inter_emu.to(torch.bfloat16)
    kin = trace["inter"]
    def ordered(x):  # bf16 bit patterns on one integer line (sign-magnitude -> two's complement): ulp distance
        v = x.contiguous().view(torch.int16).int()
        return torch.where(v < 0, -(v & 0x7FFF), v)

    ulps = (ordered(kin) - ordered(inter_emu_bf)).abs()
    far = torch.argsort(ulps.reshape(-1), descending=True)[:3]
    rep["inter"] = {"finite": bool(torch.isfinite(kin).all()), "elements_differ": int((kin != inter_emu_bf).sum()),
                    "max_bf16_ulps": int(ulps.max()), "rel": relative_error(inter_emu, kin),
                    "farthest": [{"slot": int(i) // kin.shape[1], "col": int(i) % kin.shape[1],
                                  "kernel": float(kin.reshape(-1)[i]), "emulated_fp32": float(inter_emu.reshape(-1)[i])}
                                 for i in far]}

    # 3. the intermediate's quantization: the quantizer alone, and what stage 2 propagates
    rep["a2"] = {"same_input": _differ(trace["a2"], trace["a2_scales"], quantize_nvfp4(kin.float(), p.a2_gscale)),
                 "vs_emulated": _differ(trace["a2"], trace["a2_scales"],
                                        quantize_nvfp4(inter_emu_bf.float(), p.a2_gscale))}

    # 4. outputs: per slot (unweighted) and whole
    w = p.topk_weights.reshape(-1, 1).float()
    ks = trace["out_slots"].float() / w
    per = (ks.double() - emu_slots.double()).norm(dim=1) / emu_slots.double().norm(dim=1).clamp_min(1e-300)
    worst = torch.argsort(per, descending=True)[:5]
    flat_ids = p.topk_ids.reshape(-1)
    emu_out = (emu_slots.reshape(t, k, -1) * p.topk_weights.unsqueeze(-1).float()).sum(1)
    rep["out"] = {"rel_vs_emulated": relative_error(emu_out, out),
                  "worst_slots": [{"slot": int(s), "token": int(s) // k, "expert": int(flat_ids[s]),
                                   "rel": float(per[s]), "norm_share": float(emu_slots[s].norm() / emu_slots.norm())}
                                  for s in worst]}
    if args.sweep:
        from sm120lab.bench.check import W4A4_REL_FRACTION_OK
        from sm120lab.bench.moe import w4a4_vs_emulated

        ratios = {}
        for s in range(args.seed + 1, args.seed + 1 + args.sweep):
            q = make_moe_problem(args.preset, tokens=args.tokens, routing=args.routing, seed=s, device=dev)
            _, d_emu, d_ref = w4a4_vs_emulated(q)
            ratios[s] = d_emu / d_ref
        rep["sweep"] = {"seeds": args.sweep, "fail_at": W4A4_REL_FRACTION_OK,
                        "failed": {k: v for k, v in ratios.items() if v >= W4A4_REL_FRACTION_OK},
                        "max_ratio": max(ratios.values()), "median_ratio": sorted(ratios.values())[len(ratios) // 2]}
    rep["quantizer_ptx"] = _quantizer_ptx_facts()
    text = json.dumps(rep, indent=1)
    print(text)
    if args.out:
        from sm120lab.atomic_io import write_text_atomic

        write_text_atomic(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
