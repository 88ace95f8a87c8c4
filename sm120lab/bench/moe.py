"""``sm120lab bench moe``: the Triton NVFP4 MoE layer against its peers on one GPU.

Per T: R routings (uniform top-k; R = 8 for T <= 64 so the active experts' weights do not stay in
L2 across a pass), the same list for every contender. Per (T, contender, op): CUDA-graph timing
(``triton.testing.do_bench_cudagraph`` over a pass of the R routings, per call; median, p10, p90),
and for the Triton layers also eager timing (``do_bench``) under its own row (``timing="eager"``).
Each row carries the weight bytes of the experts that received tokens (mean over routings),
GB/s on those bytes, TFLOP/s (``2*slots*3*I*H`` for the layer), % of the copy bandwidth and of the
bf16 matmul rate measured at the start of the same process, and ``x_floor``: time over the NVFP4
weight-byte floor (active experts x 3HI x 0.5625 B / copy bandwidth).

Contenders (:mod:`.contenders`): ``triton-w4a16`` (ours: prepared weights, decode kernel at
<= 1.5 rows per active expert, else the MMA kernel), ``triton-w4a16-baseline`` (the 2026-12-02
kernel with that run's best tiles), ``torch-bf16-grouped`` (``torch._grouped_mm``),
``torch-fp8-grouped`` (``torch._scaled_grouped_mm``, rowwise scales); optional ``triton-w4a4``,
``torch-loop``. Ours is tuned per T over :data:`~sm120lab.kernels.moe_configs.DECODE_CONFIGS`
(recorded under ``sweep``).

Correctness runs first, every run (:func:`check_layer`): fresh random inputs from a recorded
seed, poisoned outputs, against the fp64 reference and emulated W4A4. Every failure is recorded
under ``errors``; the JSON is rewritten after every step (atomic), so a run cut short keeps its
results.
"""

from __future__ import annotations

import datetime as _dt
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from ..nvfp4.quant_error import relative_error
from .check import W4A4_REL_FRACTION_OK, W4A16_REL_OK  # the harness's bounds, one definition
from .records import BENCH_SCHEMA_VERSION, BenchDoc, bench_rows, select

DEFAULT_TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
CONTENDERS = ("triton-w4a16", "vllm-marlin", "triton-w4a16-baseline", "torch-bf16-grouped", "torch-fp8-grouped")
#: vLLM's Marlin NVFP4 MoE (the kernel SM120 owners serve with): checked against the fp64 reference at these T
MARLIN_CHECK_T = (4, 64)
OPTIONAL_CONTENDERS = ("triton-w4a4", "torch-loop", "oai-matmul-ogs-mxfp4")
#: the baseline's tiles per T: the winners of the 2026-12-02 sweep (data/bench/moe_h200_2026-12-02.json)
BASELINE_CONFIGS = {1: ("m16n32k256w4s3", "m16n64k128w4s4"), 4: ("m16n64k128w4s4",) * 2,
                    16: ("m16n64k128w4s4",) * 2, 64: ("m16n64k128w4s4",) * 2, 256: ("m16n64k128w4s4",) * 2,
                    1024: ("m32n64k128w4s3f", "m32n64k128w4s3"), 4096: ("m128n64k64w8s2",) * 2}
#: the fragment / inline-PTX decode kernels vs the portable decode kernel: the same exact products, but other
#: fp32 summation orders, so bf16 roundings of the intermediate and the output flip on some elements (2**-8 each).
#: On the H200, 113 such comparisons (K up to 7168) gave 0 to 1.0e-3 (the largest: H=7168, I=2048, E=256, k=8,
#: T=4, 2026-12-04), while each side is 2.2e-3 to 2.6e-3 from fp64; a wrong code, scale or pairing in a tile gives
#: ~1. The bound sits at that bf16 rounding level (it was 1e-3, which the flips reached).
FAST_VS_PORTABLE_REL_OK = 2.5e-3
FLASHINFER_NOTE = (
    "FlashInfer cutlass_fused_moe (MXFP4 x bf16, SM90) not built: flashinfer.jit.fused_moe."
    "gen_cutlass_fused_moe_sm90_module() (0.6.5) compiles 181 CUDA sources; the first CUTLASS translation "
    "unit took about a minute on one CPU core; an earlier attempt on the 16-core H200 machine ran over 9 "
    "minutes; it needs cublasLt.h (nvidia-cublas wheel), absent from the plain nvcc install. The GPU time "
    "available to this recorded run (30 minutes in all, the notebook run included) could not hold that build.")


def gpu_slug() -> str:
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-").replace("nvidia-", "")


def default_out_path(root: str | Path = "data/bench", name: str | None = None) -> Path:
    """``<root>/moe_<gpu>_<UTC date>[_<name>].json`` (name: the preset or shape), with ``_2``, ``_3``... so an
    earlier run is never overwritten."""
    day = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    base = Path(root) / (f"moe_{gpu_slug()}_{day}" + (f"_{name}" if name else "") + ".json")
    path, i = base, 2
    while path.exists():
        path = base.with_name(f"{base.stem}_{i}.json")
        i += 1
    return path


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b||_F / ||b||_F (:func:`sm120lab.nvfp4.quant_error.relative_error` with ``b`` the reference)."""
    return relative_error(b, a)


def _written(out: torch.Tensor) -> bool:
    from ..constants import SENTINEL

    return bool(torch.isfinite(out).all()) and not bool((out == SENTINEL).any())


def _check_case(layer, packed, plan, gen, label: str, portable: bool) -> dict:
    """One model-shape case: fresh routing and activations, poisoned output, ``plan`` vs the fp64 reference
    (and the fragment kernels vs the portable decode kernel where ``portable``)."""
    from ..constants import SENTINEL
    from ..kernels.moe_layer import fused_moe_packed
    from ..moe.reference import moe_reference
    from .moe_problem import uniform_routing

    t = plan.tokens
    ids, tw = uniform_routing(t, layer.E, layer.k, gen=gen)
    x = torch.randn(t, layer.H, device="cuda", generator=gen).to(torch.bfloat16)
    ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
    out = torch.full((t, layer.H), SENTINEL, dtype=torch.bfloat16, device="cuda")
    fused_moe_packed(x, ids, tw, packed, plan=plan, out=out, _poison=True)
    rel = _rel(out, ref)
    row = {"case": f"model T={t} ours {label} {plan.path.value} {plan.w13.name}/{plan.w2.name}",
           "path": plan.path.value, "plan": plan.as_dict(), "rel_vs_fp64": rel, "written": _written(out),
           "ok": _written(out) and rel < W4A16_REL_OK}
    if portable:
        port = fused_moe_packed(x, ids, tw, packed, decode=True, frag=False, fast=False)
        row["rel_fast_vs_portable"] = _rel(out, port)
        row["ok"] = row["ok"] and row["rel_fast_vs_portable"] < FAST_VS_PORTABLE_REL_OK
    return row


def w4a4_vs_emulated(p, ref: torch.Tensor | None = None) -> tuple[torch.Tensor, float, float]:
    """The baseline W4A4 case of :func:`check_layer` on problem ``p``: ours (``fused_moe_nvfp4(mode="w4a4")``,
    internal buffers poisoned) against ``emulated-w4a4`` (output poisoned with SENTINEL), and the emulation
    against the fp64 reference ``ref`` (computed here if None).

    Returns:
        (ours' output, rel(ours, emulated), rel(emulated, fp64)); the case passes when the output is written
        and the second value is below ``W4A4_REL_FRACTION_OK`` x the third.
    """
    from ..constants import SENTINEL
    from ..kernels.moe_layer import fused_moe_nvfp4
    from ..moe.backends.emulated_w4a4 import EmulatedW4A4
    from ..moe.reference import moe_reference

    if ref is None:
        ref = moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, dtype=torch.float64)
    emu = torch.full(p.hidden.shape, SENTINEL, dtype=torch.float32, device=p.hidden.device)
    EmulatedW4A4().run(p, emu)
    out = fused_moe_nvfp4(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, mode="w4a4",
                          a1_gscale=p.a1_gscale, a2_gscale=p.a2_gscale, _poison=True)
    return out, _rel(out, emu), _rel(emu, ref)


def check_layer(layer, packed, seed: int, plans: dict, log: Callable[[str], None] = print) -> list[dict]:
    """Correctness of ours (and the baseline's W4A4) on this GPU; one dict per case, ``ok`` per case.

    - prepack round trip at model shape: ``unpack(prepack(w)) == w`` byte for byte;
    - model shape, every plan the benchmark times (``plans``: T -> :class:`~sm120lab.kernels.plan.MoEPlan`),
      and the decode (T=1) and MMA (the largest T) paths forced: ours vs the fp64 reference on the same
      NVFP4 weights (< ``W4A16_REL_OK``), output poisoned with SENTINEL and internal buffers with NaN;
      the fragment and inline-PTX decode kernels vs the portable decode path at T <= 64;
    - the ``small`` preset: ours vs fp64 reference, and the baseline's W4A4 vs emulated-w4a4.
    """
    from ..constants import SENTINEL
    from ..kernels.moe_layer import fused_moe_packed
    from ..kernels.plan import Path as KernelPath
    from ..kernels.plan import plan_moe
    from ..kernels.prepack import prepare_moe_weights, unpack_moe_weights
    from ..moe.problem import make_moe_problem
    from ..moe.reference import moe_reference

    res = []
    u13, u2 = unpack_moe_weights(packed)
    same = all(torch.equal(a.data, b.data) and torch.equal(a.scale.view(torch.uint8), b.scale.view(torch.uint8))
               and torch.equal(a.global_scale, b.global_scale) for a, b in ((u13, layer.w13), (u2, layer.w2)))
    res.append({"case": "prepack round trip (model shape)", "ok": same})
    del u13, u2
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed + 7)
    cases = [(p, "plan") for _, p in sorted(plans.items())]
    if plans:
        shape, t_max = next(iter(plans.values())).shape, max(plans)
        cases.append((plan_moe(shape, 1, device="cuda", paths={KernelPath.DECODE}), "forced"))
        cases.append((plan_moe(shape, t_max, device="cuda", paths={KernelPath.MMA}), "forced"))
    for plan, label in cases:
        row = _check_case(layer, packed, plan, gen, label,
                          portable=plan.tokens <= 64 and (plan.path is KernelPath.FRAG or plan.fast))
        res.append(row)
        log(str({k: v for k, v in row.items() if k != "plan"}))
    for routing, t in (("uniform", 96), ("single", 1)):
        p = make_moe_problem("small", tokens=t, routing=routing, seed=seed, device="cuda")
        pk = prepare_moe_weights(p.w13, p.w2)
        ref = moe_reference(p.hidden, p.topk_ids, p.topk_weights, p.w13, p.w2, dtype=torch.float64)
        for decode in (True, False):
            out = torch.full((t, p.config.H), SENTINEL, dtype=torch.bfloat16, device="cuda")
            fused_moe_packed(p.hidden, p.topk_ids, p.topk_weights, pk, decode=decode, frag=False, out=out,
                             _poison=True)
            rel = _rel(out, ref)
            row = {"case": f"small/{routing} T={t} ours decode={decode}", "rel_vs_fp64": rel,
                   "ok": _written(out) and rel < W4A16_REL_OK}
            res.append(row)
            log(str(row))
        out, d_emu, d_ref = w4a4_vs_emulated(p, ref)
        row = {"case": f"small/{routing} T={t} baseline w4a4", "rel_vs_emulated_w4a4": d_emu,
               "rel_emulated_vs_fp64": d_ref, "ok": _written(out) and d_emu < W4A4_REL_FRACTION_OK * d_ref}
        res.append(row)
        log(str(row))
    return res


def _configs_by_name(names):
    from ..kernels.moe_configs import CONFIGS

    return tuple(CONFIGS[n] for n in names)


def baseline_configs(t: int, e: int, k: int):
    """The 2026-12-02 baseline's tiles at T (that run's sweep winners; the MMA formula elsewhere)."""
    from ..kernels.plan import mma_tiles

    if t in BASELINE_CONFIGS:
        return _configs_by_name(BASELINE_CONFIGS[t])
    return mma_tiles(t * k / min(e, t * k))


def parse_shape(text: str):
    """``"H,I,E,k"`` -> :class:`~sm120lab.moe.problem.MoEConfig` named ``shape-H<H>-I<I>-E<E>-k<k>``;
    ValueError (one line, naming ``--shape``) for anything else."""
    from ..moe.problem import MoEConfig

    parts = [p.strip() for p in str(text).split(",")]
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        vals = []
    if len(vals) != 4 or min(vals) < 1:
        raise ValueError(f"--shape must be four positive integers H,I,E,k (hidden, expert intermediate, experts, "
                         f"top-k), got {text!r}")
    h, i, e, k = vals
    if k > e:
        raise ValueError(f"--shape: top-k must be <= the number of experts, got k={k} > E={e}")
    if h % 64 or i % 64:
        raise ValueError(f"--shape: H and I must be multiples of 64 (NVFP4 blocks and the kernels' K chunks), "
                         f"got H={h}, I={i}")
    return MoEConfig(f"shape-H{h}-I{i}-E{e}-k{k}", E=e, k=k, H=h, I=i)


def resolve_shape(model: str | None, shape: str | None):
    """The :class:`~sm120lab.moe.problem.MoEConfig` of ``--model`` or ``--shape`` (exactly one)."""
    from ..moe.problem import PRESETS

    if shape is not None:
        if model is not None:
            raise ValueError("give --model or --shape, not both")
        return parse_shape(shape)
    model = model or "qwen3.5-397b-a17b"
    if model not in PRESETS:
        raise ValueError(f"--model must be one of {', '.join(sorted(PRESETS))}, got {model!r}")
    return PRESETS[model]


def tune_pairs(group, default_w2):
    """The greedy order of a tune group (path, w13 tiles, w2 tiles): every w13 tile with ``default_w2``,
    then (after the caller's pick) every w2 tile with the best w13; an empty w2 list = the same tile for both."""
    path, c13s, c2s = group
    if not c2s:
        return [(c, c) for c in c13s], None
    w2 = default_w2 if default_w2 in c2s else c2s[0]
    return [(c, w2) for c in c13s], c2s


def _setup_peer(doc, cfg, seed, contenders, log, guarded):
    """The peer's weights and its check (T = 4, 64 vs :func:`.peer.peer_reference`: shape, finite, rel. error);
    None (reason in ``doc["notes"]["peer"]``) when it cannot run or fails its check."""
    from .moe_problem import uniform_routing
    from .peer import PEER_REL_OK, make_peer_weights, peer_moe, peer_reference, peer_unavailable

    why = peer_unavailable()
    if why:
        doc["notes"]["peer"] = why
        log("peer: " + why)
        return None
    pw = guarded("peer weights", lambda: make_peer_weights(cfg.E, cfg.H, cfg.I, seed=seed + 3))
    if pw is None:
        doc["notes"]["peer"] = "peer weights failed (see errors)"
        return None
    gen = torch.Generator(device="cuda").manual_seed(seed + 9)
    ok = True
    doc["peer_checks"] = []
    for t in (4, 64):
        ids, tw = uniform_routing(t, cfg.E, cfg.k, gen=gen)
        x = torch.randn(t, cfg.H, device="cuda", generator=gen).to(torch.bfloat16)

        def one(x=x, ids=ids, tw=tw, t=t):
            out = peer_moe(pw, x, ids, tw)
            ref = peer_reference(pw, x, ids, tw)
            written = tuple(out.shape) == (t, cfg.H) and bool(torch.isfinite(out).all())
            return {"case": f"peer T={t} vs its torch reference", "rel_vs_ref": _rel(out, ref), "written": written,
                    "ok": written and _rel(out, ref) < PEER_REL_OK}

        row = guarded(f"peer check T={t}", one) or {"case": f"peer T={t}", "ok": False}
        doc["peer_checks"].append(row)
        log(str(row))
        ok = ok and row["ok"]
    if not ok:
        doc["notes"]["peer"] = "the peer failed its check: not timed"
        return None
    doc["notes"]["peer"] = ("oai-matmul-ogs-mxfp4: triton_kernels matmul_ogs (bf16 x MXFP4, Hopper layouts) composed as "
                            "vLLM's OAI Triton experts; gpt-oss SwiGLU (alpha 1.702, limit 7); x_floor against the "
                            "NVFP4 floor, x_own_floor against MXFP4's (sm120lab.bench.peer)")
    return pw


def _setup_marlin(doc, layer, seed, log, guarded):
    """vLLM's Marlin on the layer's NVFP4 tensors, repacked once by vLLM's own code, and its check (T in
    :data:`MARLIN_CHECK_T` vs the fp64 reference, poisoned output, < ``W4A16_REL_OK``); None (reason in
    ``doc["notes"]["vllm-marlin"]``) when it cannot run or fails its check: a wrong kernel is never timed."""
    from ..constants import SENTINEL
    from ..moe.backends.vllm_nvfp4 import VllmMarlin
    from ..moe.reference import moe_reference
    from .moe_problem import uniform_routing

    marlin = VllmMarlin()
    why = marlin.skip_reason("cuda")
    if why is None:
        rt = guarded("vllm-marlin import", marlin.runtime)
        why = None if rt is not None else "vLLM's Marlin path did not import (see errors)"
    if why is not None:
        doc["notes"]["vllm-marlin"] = why
        log("vllm-marlin: " + why)
        return None
    t_prep = time.perf_counter()
    prepared = guarded("vllm-marlin prepare", lambda: marlin.prepare_weights(layer.w13, layer.w2))
    if prepared is None:
        doc["notes"]["vllm-marlin"] = "vLLM's prepare_nvfp4_moe_layer_for_marlin failed (see errors)"
        return None
    torch.cuda.synchronize()
    doc["marlin"] = {**rt.notes(), "prepare_s": time.perf_counter() - t_prep, "ops": rt.ops, "checks": []}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed + 11)
    for t in MARLIN_CHECK_T:
        def one(t=t):
            ids, tw = uniform_routing(t, layer.E, layer.k, gen=gen)
            x = torch.randn(t, layer.H, device="cuda", generator=gen).to(torch.bfloat16)
            out = torch.full((t, layer.H), SENTINEL, dtype=torch.bfloat16, device="cuda")
            marlin.call(prepared, x, tw, ids.to(torch.int32), output=out)
            ref = moe_reference(x, ids, tw, layer.w13, layer.w2, dtype=torch.float64)
            rel = _rel(out, ref)
            return {"case": f"vllm-marlin T={t} vs fp64 reference", "rel_vs_fp64": rel, "written": _written(out),
                    "ok": _written(out) and rel < W4A16_REL_OK}
        row = guarded(f"vllm-marlin check T={t}", one) or {"case": f"vllm-marlin T={t}", "ok": False}
        doc["marlin"]["checks"].append(row)
        log(str(row))
    if not all(r["ok"] for r in doc["marlin"]["checks"]):
        doc["notes"]["vllm-marlin"] = "vLLM's Marlin failed its check: not timed"
        return None
    doc["notes"]["vllm-marlin"] = (
        f"vllm-marlin: vLLM {rt.version}'s fused_marlin_moe ({rt.source}) on the same NVFP4 codes, block and "
        "global scales and routings, weights repacked once by vLLM's prepare_nvfp4_moe_layer_for_marlin (outside "
        "the timing); vLLM's defaults: block size from its heuristic, a new zeroed workspace per call, fp32 "
        "reduce; topk_ids int32 as vLLM's router gives them")
    return prepared


def run_moe_bench(out_path: str | Path, *, model: str | None = None, shape: str | None = None,
                  tokens=DEFAULT_TOKENS, contenders=CONTENDERS, tune: bool = False, tiles: str | Path | None = None,
                  check: bool = True, command: str = "", log: Callable[[str], None] = print,
                  seed: int | None = None, deadline: float | None = None, eager: bool = True) -> dict:
    """Run the benchmark, writing ``out_path`` (JSON) after every step; returns the document.

    Args:
        model / shape: a preset name, or ``"H,I,E,k"`` (exactly one; default the Qwen3.5-397B preset).
        tune: time the plan's candidate tiles per T (:func:`~sm120lab.kernels.plan.tune_candidates`) and
            write the winners to the tile table ``tiles``; the timed rows then run the plan read from it.
        tiles: the tile-table JSON to read (and, with ``tune``, write); default ``data/tiles/<device>.json``.
        seed: weights and routings are drawn from it (None: a fresh one, recorded).
        deadline: ``time.time()`` value after which T values not yet started are skipped (recorded).
        eager: also time ours without CUDA graphs (rows with ``timing="eager"``).
    """
    from ..atomic_io import write_json_atomic
    from ..envinfo import collect
    from ..kernels.plan import (
        TILES_DIR,
        MoEShape,
        TileTable,
        plan_moe,
        table_path,
        target_of,
        tune_candidates,
    )
    from ..kernels.plan import Path as KernelPath
    from ..kernels.prepack import prepare_moe_weights
    from .ceilings import measure_bf16_tflops, measure_copy_gbps
    from .contenders import make_moe, make_sort, make_w13
    from .moe_problem import make_bench_layer, uniform_routing
    from .peer import PEER, mxfp4_bytes_per_expert, peer_moe
    from .profile import kernel_breakdown
    from .timing import time_eager, time_graph

    if not torch.cuda.is_available():
        raise RuntimeError("sm120lab bench moe needs a CUDA GPU (torch.cuda.is_available() is False)")
    cfg = resolve_shape(model, shape)
    unknown = set(contenders) - set(CONTENDERS) - set(OPTIONAL_CONTENDERS)
    if unknown:
        raise ValueError(f"unknown contenders {sorted(unknown)}; choose from {CONTENDERS + OPTIONAL_CONTENDERS}")
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    target = target_of("cuda")
    mshape = MoEShape.of(cfg.E, cfg.H, cfg.I, cfg.k)
    tiles_path = Path(tiles) if tiles is not None else (table_path(target) or TILES_DIR / f"{target.name}.json")
    table = TileTable.load(tiles_path) if tiles_path.is_file() else TileTable(
        device=target.name, verified=True, source="sm120lab bench moe --tune (CUDA-graph medians on this device)")
    out_path = Path(out_path)
    doc = {"schema_version": BENCH_SCHEMA_VERSION, "env": collect(), "command": command, "model": cfg.name,
           "seed": seed,
           "shape": {"E": cfg.E, "k": cfg.k, "H": cfg.H, "I": cfg.I}, "target": target.as_dict(),
           "tiles": {"path": str(tiles_path), "tuned_here": tune, "verified": table.verified,
                     "entries_before": len(table.entries)},
           "ceilings": {}, "checks": [], "rows": [], "sweep": [], "plans": {}, "errors": [], "notes": {
               "weights": "random NVFP4 codes/scales at model shape (sm120lab.bench.moe_problem); bf16/fp8 "
                          "contenders use the dequantized values",
               "timing": "cuda_graph rows: triton.testing.do_bench_cudagraph over a pass of the routings, per "
                         "call; eager rows: triton.testing.do_bench (L2 flushed per pass)",
               "ours": "triton-w4a16 = fused_moe_packed(plan=...) on prepare_moe_weights output; the plan "
                       "(sm120lab.kernels.plan.plan_moe: tile table, else formula) is recorded in every row",
               "flashinfer": FLASHINFER_NOTE}}

    def save():
        write_json_atomic(out_path, doc)

    def guarded(what: str, fn: Callable[[], object]):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one failure must not end the run; it is recorded
            torch.cuda.synchronize()
            msg = f"{what}: {type(exc).__name__}: {str(exc)[:300]}"
            doc["errors"].append(msg)
            log("ERROR " + msg)
            log(traceback.format_exc(limit=4)[-800:])
            save()
            return None

    t0 = time.perf_counter()
    c1 = measure_copy_gbps()
    c2 = measure_bf16_tflops()
    doc["ceilings"] = {"copy_GBps": c1["copy_GBps"], "bf16_TFLOPs": c2["bf16_TFLOPs"], "detail": {**c1, **c2}}
    ceil = doc["ceilings"]
    log(f"ceilings: copy {ceil['copy_GBps']:.0f} GB/s, bf16 {ceil['bf16_TFLOPs']:.0f} TFLOP/s")
    need_dense = any(c.startswith("torch") for c in contenders)
    layer = make_bench_layer(cfg.E, cfg.k, cfg.H, cfg.I, seed=seed, bf16=need_dense,
                             fp8="torch-fp8-grouped" in contenders)
    t_prep = time.perf_counter()
    packed = prepare_moe_weights(layer.w13, layer.w2)
    torch.cuda.synchronize()
    doc["prepare_s"] = time.perf_counter() - t_prep
    log(f"layer {cfg.name} ready ({time.perf_counter() - t0:.1f} s; prepare_moe_weights {doc['prepare_s']:.2f} s)")
    has_frag = packed.w13.has_frag and packed.w2.has_frag
    paths = None if has_frag else frozenset({KernelPath.DECODE, KernelPath.MMA})

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed + 1)
    routes_of = {}

    def routes(t):
        if t not in routes_of:
            n_r = 8 if t <= 64 else 4 if t <= 512 else 2
            rs = []
            for _ in range(n_r):
                ids, tw = uniform_routing(t, cfg.E, cfg.k, gen=gen)
                x = torch.randn(t, cfg.H, device="cuda", generator=gen).to(torch.bfloat16)
                rs.append((x, ids, tw))
            routes_of[t] = rs
        return routes_of[t]

    def timed(what, t, maker, graph=True):
        fns = guarded(f"T={t} {what} setup", lambda: [maker(*r) for r in routes(t)])
        if fns is None:
            return None
        return guarded(f"T={t} {what}", lambda: time_graph(fns) if graph else time_eager(fns))

    def profiled(contender, t, maker, timing):
        """The layer's kernels one by one (:mod:`.profile`) next to its timed median, in ``doc["profile"]``."""
        fn = guarded(f"T={t} {contender} profile setup", lambda: maker(*routes(t)[0]))
        prof = None if fn is None else guarded(f"T={t} {contender} profile", lambda: kernel_breakdown(fn))
        if prof is not None:
            prof.update(timed_us=timing["us_median"], timing=timing["timing"],
                        gap_us=timing["us_median"] - prof["kernel_us"])
            doc.setdefault("profile", {}).setdefault(str(t), {})[contender] = prof
            top = ", ".join(f"{k['kernel'][:40]} {k['us_per_layer']:.1f}" for k in prof["kernels"][:4])
            log(f"T={t} {contender} profile: kernels {prof['kernel_us']:.1f} us of {timing['us_median']:.1f}: {top}")

    def tune_t(t: int) -> None:
        """Greedy sweep of the plan's candidate groups at T; the winner goes into the table."""
        best = None  # (us, path, w13, w2)

        def try_pair(c13, c2):
            name = c13.name if c13 is c2 else f"{c13.name}+{c2.name}"
            p = guarded(f"T={t} plan {name}", lambda: plan_moe(mshape, t, target=target, tiles=(c13, c2)))
            if p is None:
                return None
            r = timed(f"tune {name}", t, lambda *a: make_moe("triton-w4a16", layer, *a, packed=packed, plan=p))
            if r is not None:
                doc["sweep"].append({"T": t, "op": "moe", "config": name, "path": p.path.value, **r})
                log(f"T={t} tune {p.path.value} {name}: {r['us_median']:.1f} us")
            return None if r is None else r["us_median"]

        for group in tune_candidates(mshape, t, target):
            if group[0] is KernelPath.FRAG and not has_frag:
                continue
            default_w2 = plan_moe(mshape, t, target=target, table=False, paths={group[0]}).w2
            pairs, w2s = tune_pairs(group, default_w2)
            gbest = None
            for c13, c2 in pairs:
                us = try_pair(c13, c2)
                if us is not None and (gbest is None or us < gbest[0]):
                    gbest = (us, c13, c2)
            for c2 in (w2s or []):
                if gbest is None or c2 is gbest[2] or c2.SORTED != gbest[1].SORTED or c2.block_m != gbest[1].block_m:
                    continue
                us = try_pair(gbest[1], c2)
                if us is not None and us < gbest[0]:
                    gbest = (us, gbest[1], c2)
            if gbest is not None and (best is None or gbest[0] < best[0]):
                best = (gbest[0], group[0], gbest[1], gbest[2])
        if best is not None:
            table.put(mshape, t, best[1], best[2], best[3], us=round(best[0], 2), preset=cfg.name,
                      copy_GBps=round(ceil["copy_GBps"]), triton=doc["env"]["packages"].get("triton"),
                      date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"))
            table.save(tiles_path)
            log(f"T={t} tuned: {best[1].value} {best[2].name}/{best[3].name} {best[0]:.1f} us -> {tiles_path}")
        save()

    live = []
    for t in tokens:
        if deadline is not None and time.time() > deadline:
            doc["errors"].append(f"T={t}: skipped, time budget used up")
            log(doc["errors"][-1])
            continue
        live.append(t)
        if tune:
            tune_t(t)
    plans = {t: plan_moe(mshape, t, target=target, table=table, paths=paths) for t in live}
    doc["plans"] = {str(t): p.as_dict() for t, p in plans.items()}
    doc["tiles"]["entries_after"] = len(table.entries)
    save()
    if check:
        doc["checks"] = guarded("checks", lambda: check_layer(layer, packed, seed, plans, log)) or []
        doc["checks_ok"] = bool(doc["checks"]) and all(c["ok"] for c in doc["checks"])
        log(f"checks: {sum(c['ok'] for c in doc['checks'])}/{len(doc['checks'])} ok")
        bad = [c for c in doc["checks"] if not c["ok"] and c.get("path")]
        if bad or not doc["checks"]:  # never time a wrong kernel
            doc["notes"]["ours_not_timed"] = f"a plan failed its check ({bad[0]['case'] if bad else 'no checks'})"
            log(doc["notes"]["ours_not_timed"])
            contenders = tuple(c for c in contenders if c != "triton-w4a16")
    save()
    peer = _setup_peer(doc, cfg, seed, contenders, log, guarded) if PEER in contenders else None
    if peer is None:
        contenders = tuple(c for c in contenders if c != PEER)
    marlin_w = _setup_marlin(doc, layer, seed, log, guarded) if "vllm-marlin" in contenders else None
    if marlin_w is None:
        contenders = tuple(c for c in contenders if c != "vllm-marlin")

    def mk_marlin(x, ids, tw):
        from ..moe.backends.vllm_nvfp4 import VllmMarlin

        ids32, m = ids.to(torch.int32), VllmMarlin()
        return lambda: m.call(marlin_w, x, tw, ids32)

    def mk_peer(x, ids, tw):
        return lambda: peer_moe(peer, x, ids, tw)
    save()

    def bench_t(t: int) -> None:
        rs = routes(t)
        n_active = sum(int(torch.unique(r[1]).numel()) for r in rs) / len(rs)
        slots = t * cfg.k
        a1 = torch.tensor([448.0 * 6.0 / 4.0], device="cuda")  # static scales: values do not change timing
        a2 = torch.tensor([448.0 * 6.0 / 0.5], device="cuda")
        doc.setdefault("active_experts", {})[str(t)] = n_active
        floor_us = {op: layer.nvfp4_bytes_per_expert(op) * n_active / (ceil["copy_GBps"] * 1e3)
                    for op in ("moe", "w13")}
        doc.setdefault("floor_us", {})[str(t)] = floor_us

        def record(contender, op, timing, wbytes, **extra):
            us = timing["us_median"]
            gbps = wbytes / (us * 1e-6) / 1e9 if wbytes else 0.0
            tflops = layer.flops(op, slots) / (us * 1e-6) / 1e12
            row = {"T": t, "contender": contender, "op": op, **timing, "weight_bytes": int(wbytes), "GBps": gbps,
                   "TFLOPs": tflops, "pct_copy_bw": 100.0 * gbps / ceil["copy_GBps"],
                   "pct_bf16": 100.0 * tflops / ceil["bf16_TFLOPs"],
                   "x_floor": us / floor_us[op] if op in floor_us else None, **extra}
            doc["rows"].append(row)
            log(f"T={t:5d} {contender:22s} {op:5s} {us:10.1f} us  {row['GBps']:7.0f} GB/s "
                f"({row['pct_copy_bw']:5.1f}% copy)  {tflops:7.1f} TFLOP/s  [{timing['timing']}]")
            save()

        plan = plans[t]
        base_cfg = baseline_configs(t, cfg.E, cfg.k)
        ours_extra = {"path": plan.path.value, "w13_config": plan.w13.name, "w2_config": plan.w2.name,
                      "plan": plan.as_dict()}
        base_extra = {"w13_config": base_cfg[0].name, "w2_config": base_cfg[1].name}
        nv_moe = layer.nvfp4_bytes_per_expert("moe") * n_active
        nv_w13 = layer.nvfp4_bytes_per_expert("w13") * n_active

        for name in contenders:
            if name == "triton-w4a16":
                mk = (lambda *a, name=name: make_moe(name, layer, *a, packed=packed, plan=plan))
                for graph in (True, False) if eager else (True,):
                    r = timed(f"{name} moe", t, mk, graph)
                    if r:
                        record(name, "moe", r, nv_moe, x_own_floor=r["us_median"] / floor_us["moe"], format="nvfp4",
                               **ours_extra)
                        if graph:
                            profiled(name, t, mk, r)
                r = timed(f"{name} w13", t, lambda *a, name=name: make_w13(name, layer, *a, packed=packed, plan=plan)
                          ) if t <= 64 else None
                if r:
                    record(name, "w13", r, nv_w13, **ours_extra)
                if plan.sort_block:
                    r = timed("sort", t, lambda x, ids, tw, bm=plan.sort_block: make_sort(layer, ids, bm))
                    if r:
                        record(name, "sort", r, 0, block_m=plan.sort_block)
            elif name in ("triton-w4a16-baseline", "triton-w4a4"):
                mk = (lambda *a, name=name: make_moe(name, layer, *a, configs=base_cfg, a1=a1, a2=a2))
                r = timed(f"{name} moe", t, mk, True)
                if r:
                    record(name, "moe", r, nv_moe, **base_extra)
            elif name == PEER:
                r = timed(f"{name} moe", t, mk_peer)
                if r is None:  # not capturable in a CUDA graph: eager, said so in the row
                    r = timed(f"{name} moe eager", t, mk_peer, False)
                if r:
                    profiled(name, t, mk_peer, r)
                    own = mxfp4_bytes_per_expert(cfg.H, cfg.I) * n_active
                    record(name, "moe", r, own, x_own_floor=r["us_median"] / (own / (ceil["copy_GBps"] * 1e3)),
                           format="mxfp4")
            elif name == "vllm-marlin":
                r = timed(f"{name} moe", t, mk_marlin)
                if r is None:  # not capturable in a CUDA graph: eager, said so in the row
                    r = timed(f"{name} moe eager", t, mk_marlin, False)
                if r:
                    profiled(name, t, mk_marlin, r)
                    record(name, "moe", r, nv_moe, x_own_floor=r["us_median"] / floor_us["moe"], format="nvfp4")
            elif name == "torch-loop":
                r = timed(f"{name} moe", t, lambda *a, name=name: make_moe(name, layer, *a), graph=False)
                if r:
                    record(name, "moe", r, layer.dense_bytes_per_expert("moe", 2) * n_active)
            else:
                bf = name == "torch-bf16-grouped"
                wb = (layer.dense_bytes_per_expert("moe", 2) if bf else layer.dense_bytes_per_expert("moe", 1, 4))
                wb13 = (layer.dense_bytes_per_expert("w13", 2) if bf else layer.dense_bytes_per_expert("w13", 1, 4))
                r = timed(f"{name} moe", t, lambda *a, name=name: make_moe(name, layer, *a))
                if r:
                    record(name, "moe", r, wb * n_active)
                r = timed(f"{name} w13", t, lambda *a, name=name: make_w13(name, layer, *a)) if t <= 64 else None
                if r:
                    record(name, "w13", r, wb13 * n_active)
        torch.cuda.empty_cache()

    for t in live:
        if deadline is not None and time.time() > deadline:
            doc["errors"].append(f"T={t}: timing skipped, time budget used up")
            log(doc["errors"][-1])
            continue
        bench_t(t)
    doc["wall_s"] = time.perf_counter() - t0
    doc["targets"] = evaluate_targets(doc)
    save()
    return doc


def find_row(doc: dict | BenchDoc, t: int, contender: str, op: str, timing: str = "cuda_graph") -> dict | None:
    """The row of (T, contender, op) with this timing mode as recorded (a dict), or None."""
    hit = select(bench_rows(doc), op, timing, contender=contender, T=t)
    return hit[0].as_dict() if hit else None


def evaluate_targets(doc: dict) -> dict:
    """The issue's targets as measured numbers, each with a ``met`` flag (None where a row is missing).

    - w13 >= 75% of copy bandwidth at T = 1, 4, 16;
    - whole layer within 1.35x of the NVFP4 weight-byte floor at T <= 16;
    - faster than torch FP8 grouped at every T;
    - >= 1.0x torch bf16 grouped at T = 4096 (1.5x stretch);
    - faster than vLLM's Marlin (``vllm-marlin``, Marlin time / ours) at every T, where it was timed;
    - faster than the production peer (``oai-matmul-ogs-mxfp4``) at every T, where it was timed;
    - time never decreases as T grows, within 3%: ``us(T_next) >= 0.97 us(T)`` for consecutive measured T.
    """
    ts = sorted({r["T"] for r in doc["rows"]})
    ours = "triton-w4a16"

    def us(t, c, op="moe"):
        r = find_row(doc, t, c, op)
        return r["us_median"] if r else None

    w13 = {str(t): (find_row(doc, t, ours, "w13") or {}).get("pct_copy_bw") for t in (1, 4, 16)}
    floor = {str(t): (find_row(doc, t, ours, "moe") or {}).get("x_floor") for t in (1, 4, 16)}
    vs_fp8 = {str(t): (us(t, "torch-fp8-grouped") / us(t, ours) if us(t, ours) and us(t, "torch-fp8-grouped")
                       else None) for t in ts}
    b, o = us(4096, "torch-bf16-grouped"), us(4096, ours)
    vs_bf16 = b / o if b and o else None

    def all_met(d, ok):
        vals = list(d.values())
        return bool(vals) and all(v is not None and ok(v) for v in vals)

    peer = "oai-matmul-ogs-mxfp4"
    vs_peer = {str(t): us(t, peer) / us(t, ours) for t in ts if us(t, ours) and us(t, peer)}
    vs_marlin = {str(t): us(t, "vllm-marlin") / us(t, ours) for t in ts if us(t, ours) and us(t, "vllm-marlin")}
    ours_ts = [t for t in ts if us(t, ours)]
    steps = {f"{a}->{b}": us(b, ours) / us(a, ours) for a, b in zip(ours_ts, ours_ts[1:])}
    return {
        "time_ratio_next_T": steps, "monotone_in_T_within_3pct": all(v >= 0.97 for v in steps.values()),
        "speedup_vs_marlin": vs_marlin,
        "faster_than_marlin_every_T": all_met(vs_marlin, lambda v: v > 1.0) if vs_marlin else None,
        "speedup_vs_peer": vs_peer, "faster_than_peer_every_T": all_met(vs_peer, lambda v: v > 1.0) if vs_peer else None,
        "w13_pct_copy_bw": w13, "w13_ge_75pct_copy_bw": all_met(w13, lambda v: v >= 75.0),
        "layer_x_floor": floor, "layer_within_1.35x_floor": all_met(floor, lambda v: v <= 1.35),
        "speedup_vs_fp8": vs_fp8, "faster_than_fp8_every_T": all_met(vs_fp8, lambda v: v > 1.0),
        "speedup_vs_bf16_T4096": vs_bf16, "ge_1.0x_bf16_T4096": vs_bf16 is not None and vs_bf16 >= 1.0,
    }
