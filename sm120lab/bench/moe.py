"""``sm120lab bench moe``: the Triton NVFP4 MoE layer against torch contenders on one GPU.

For each T: R routings (uniform top-k; R = 8 for T <= 64 so the active experts' weights do not
stay in L2 across repetitions), the same list for every contender. Per (T, contender, op):
CUDA-event median/p10/p90 of >= ``reps`` calls after warm-up (CUDA-graph replay where capturable,
else eager; the row says which), weight bytes of the experts that received tokens (mean over the
routings), GB/s on those bytes, TFLOP/s (2*slots*(2IH + HI) for the layer), and both as % of the
copy bandwidth and bf16 matmul rate measured at the start of the same run. The Triton tile
configs are chosen per T by timing the candidates of :data:`sm120lab.kernels.moe_configs.CONFIGS`
(recorded under ``sweep``). Every failure is recorded as a string under ``errors``; the JSON is
rewritten after every step, so a run cut short still leaves its results.

Result schema: ``/tmp/moe_contract.md`` (issue 7 writes, issue 5 reads).
"""

from __future__ import annotations

import datetime as _dt
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

DEFAULT_TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
CONTENDERS = ("triton-w4a16", "triton-w4a4", "torch-bf16-grouped", "torch-fp8-grouped", "torch-loop")


def gpu_slug() -> str:
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-").replace("nvidia-", "")


def default_out_path(root: str | Path = "data/bench") -> Path:
    day = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    return Path(root) / f"moe_{gpu_slug()}_{day}.json"


def _candidates(t: int, k: int):
    from ..kernels.moe_configs import CONFIGS

    slots = t * k
    if slots <= 2560:
        bms = (16,)
    elif slots <= 10240:
        bms = (16, 32)
    else:
        bms = (32, 64, 128)
    return [c for c in CONFIGS.values() if c.BLOCK_M in bms]


def _row(layer, t, contender, op, timing, wbytes, slots, ceilings, mode, **extra) -> dict:
    us = timing["us_median"]
    gbps = wbytes / (us * 1e-6) / 1e9 if wbytes else 0.0
    tflops = layer.flops(op, slots) / (us * 1e-6) / 1e12
    return {"T": t, "contender": contender, "op": op, "us_median": us, "us_p10": timing["us_p10"],
            "us_p90": timing["us_p90"], "n_reps": timing["n_reps"], "weight_bytes": int(wbytes), "GBps": gbps,
            "TFLOPs": tflops, "pct_copy_bw": 100.0 * gbps / ceilings["copy_GBps"],
            "pct_bf16": 100.0 * tflops / ceilings["bf16_TFLOPs"], "timing": mode, **extra}


def _timed(fns: list[Callable], reps: int, use_graph: bool) -> tuple[dict, str]:
    from .timing import graphed, time_calls

    if use_graph:
        try:
            replays = [graphed(f) for f in fns]
            return time_calls(replays, reps=reps, warmup=3), "cuda_graph"
        except Exception as exc:  # noqa: BLE001 - recorded, fall back to eager
            torch.cuda.synchronize()
            mode = f"eager (graph capture failed: {type(exc).__name__}: {str(exc)[:160]})"
            return time_calls(fns, reps=reps, warmup=3), mode
    return time_calls(fns, reps=reps, warmup=3), "eager"


def run_moe_bench(out_path: str | Path, *, model: str = "qwen3.5-397b-a17b", tokens=DEFAULT_TOKENS,
                  contenders=CONTENDERS, reps: int = 50, loop_reps: int = 10, sweep: bool = True,
                  command: str = "", log: Callable[[str], None] = print, seed: int = 0,
                  deadline: float | None = None) -> dict:
    """Run the benchmark, writing ``out_path`` (JSON) after every step; returns the document.

    ``deadline`` (``time.time()`` value): T values not started by then are skipped (recorded)."""
    from ..atomic_io import write_json_atomic
    from ..envinfo import collect
    from ..kernels.moe_configs import pick_configs
    from ..moe.problem import PRESETS
    from .ceilings import measure_bf16_tflops, measure_copy_gbps
    from .contenders import make_moe, make_sort, make_w2, make_w13
    from .moe_problem import make_bench_layer, uniform_routing

    if not torch.cuda.is_available():
        raise RuntimeError("sm120lab bench moe needs a CUDA GPU (torch.cuda.is_available() is False)")
    if model not in PRESETS:
        raise ValueError(f"model must be one of {sorted(PRESETS)}, got {model!r}")
    unknown = set(contenders) - set(CONTENDERS)
    if unknown:
        raise ValueError(f"unknown contenders {sorted(unknown)}; choose from {CONTENDERS}")
    cfg = PRESETS[model]
    out_path = Path(out_path)
    doc = {"env": collect(), "command": command, "model": model,
           "shape": {"E": cfg.E, "k": cfg.k, "H": cfg.H, "I": cfg.I}, "ceilings": {}, "rows": [],
           "sweep": [], "errors": [], "notes": {
               "weights": "random NVFP4 codes/scales at model shape (sm120lab.bench.moe_problem); bf16/fp8 "
                          "contenders use the dequantized values",
               "flashinfer": "FlashInfer cutlass_fused_moe (MXFP4 x bf16 on SM90) not attempted: its JIT build "
                             "took > 9 min on a 16-core H200 machine (landscape.md), beyond this run's budget"}}

    def save():
        write_json_atomic(out_path, doc)

    def attempt(what: str, fn: Callable[[], object]):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one failure must not end the run
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
    torch.cuda.synchronize()
    log(f"layer ready ({time.perf_counter() - t0:.1f} s)")
    save()

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed + 1)
    for t in tokens:
        if deadline is not None and time.time() > deadline:
            doc["errors"].append(f"T={t}: skipped, time budget used up")
            log(doc["errors"][-1])
            continue
        n_r = 8 if t <= 64 else 4 if t <= 512 else 2
        routes = []
        for _ in range(n_r):
            ids, tw = uniform_routing(t, cfg.E, cfg.k, gen=gen)
            x = torch.randn(t, cfg.H, device="cuda", generator=gen).to(torch.bfloat16)
            routes.append((x, ids, tw))
        n_active = sum(int(torch.unique(r[1]).numel()) for r in routes) / n_r
        slots = t * cfg.k
        a1 = torch.tensor([448.0 * 6.0 / 4.0], device="cuda")  # static scales: values do not change timing
        a2 = torch.tensor([448.0 * 6.0 / 0.5], device="cuda")
        doc.setdefault("active_experts", {})[str(t)] = n_active

        def nv(op):
            return layer.nvfp4_bytes_per_expert(op) * n_active

        def rec(contender, op, timing_mode, wbytes, **extra):
            timing, mode = timing_mode
            row = _row(layer, t, contender, op, timing, wbytes, slots, ceil, mode, **extra)
            doc["rows"].append(row)
            log(f"T={t:5d} {contender:22s} {op:5s} {row['us_median']:10.1f} us  {row['GBps']:7.0f} GB/s "
                f"({row['pct_copy_bw']:5.1f}% copy)  {row['TFLOPs']:7.1f} TFLOP/s  [{mode[:20]}]")
            save()

        # --- Triton: config sweep on the two GEMMs, then the layer with the best pair
        chosen = pick_configs(slots / min(cfg.E, slots))
        if any(c.startswith("triton") for c in contenders) and sweep:
            best: dict[int, dict] = {}
            for c in _candidates(t, cfg.k):
                for op, maker in (("w13", make_w13), ("w2", make_w2)):
                    res = attempt(f"T={t} sweep {op} {c.name}", lambda: _timed(
                        [maker("triton-w4a16", layer, *r, configs=(c, c)) for r in routes], max(20, reps // 2), True))
                    if res is None:
                        continue
                    doc["sweep"].append({"T": t, "op": op, "config": c.name, **res[0], "timing": res[1]})
                    b = best.setdefault(c.BLOCK_M, {})
                    if op not in b or res[0]["us_median"] < b[op][0]:
                        b[op] = (res[0]["us_median"], c)
            pairs = [(v["w13"][0] + v["w2"][0], v["w13"][1], v["w2"][1]) for v in best.values() if len(v) == 2]
            if pairs:
                _, c13, c2_ = min(pairs, key=lambda p: p[0])
                chosen = (c13, c2_)
            save()
        cfg_names = {"w13_config": chosen[0].name, "w2_config": chosen[1].name}
        log(f"T={t}: configs {cfg_names}")

        for name in contenders:
            if name == "torch-loop":
                res = attempt(f"T={t} {name} moe", lambda: _timed(
                    [make_moe(name, layer, *r) for r in routes], loop_reps if t >= 256 else max(loop_reps, 20), False))
                if res:
                    rec(name, "moe", res, layer.dense_bytes_per_expert("moe", 2) * n_active)
                continue
            if name.startswith("triton"):
                wb = nv("moe")
                extra = cfg_names
            elif name == "torch-bf16-grouped":
                wb = layer.dense_bytes_per_expert("moe", 2) * n_active
                extra = {}
            else:
                wb = layer.dense_bytes_per_expert("moe", 1, 4) * n_active
                extra = {}
            res = attempt(f"T={t} {name} moe", lambda: _timed(
                [make_moe(name, layer, *r, configs=chosen, a1=a1, a2=a2) for r in routes], reps, True))
            if res:
                rec(name, "moe", res, wb, **extra)
            if name == "triton-w4a16":
                res = attempt(f"T={t} {name} moe eager", lambda: _timed(
                    [make_moe(name, layer, *r, configs=chosen) for r in routes], reps, False))
                if res:
                    rec(name, "moe", res, wb, **extra)
                for op, maker in (("w13", make_w13), ("w2", make_w2)):
                    res = attempt(f"T={t} {name} {op}", lambda: _timed(
                        [maker(name, layer, *r, configs=chosen) for r in routes], reps, True))
                    if res:
                        rec(name, op, res, nv(op), **extra)
                res = attempt(f"T={t} sort", lambda: _timed(
                    [make_sort(layer, r[1], chosen[0].BLOCK_M) for r in routes], reps, True))
                if res:
                    rec(name, "sort", res, 0, **extra)
            if name in ("torch-bf16-grouped", "torch-fp8-grouped"):
                wb13 = (layer.dense_bytes_per_expert("w13", 2) if name == "torch-bf16-grouped"
                        else layer.dense_bytes_per_expert("w13", 1, 4)) * n_active
                res = attempt(f"T={t} {name} w13", lambda: _timed(
                    [make_w13(name, layer, *r) for r in routes], reps, True))
                if res:
                    rec(name, "w13", res, wb13)
        del routes
        torch.cuda.empty_cache()
    doc["wall_s"] = time.perf_counter() - t0
    doc["targets"] = evaluate_targets(doc)
    save()
    return doc


def _find(doc, t, contender, op, timing="cuda_graph"):
    for r in doc["rows"]:
        if r["T"] == t and r["contender"] == contender and r["op"] == op and r["timing"].startswith(timing[:5]):
            return r
    return None


def evaluate_targets(doc: dict) -> dict:
    """The issue's three targets, as measured ratios (None where a number is missing)."""
    out = {}
    w13 = {t: _find(doc, t, "triton-w4a16", "w13") for t in (1, 4, 16)}
    out["w13_pct_copy_bw_T_le_16"] = {str(t): (r["pct_copy_bw"] if r else None) for t, r in w13.items()}
    out["w13_ge_75pct_copy_bw"] = all(r is not None and r["pct_copy_bw"] >= 75 for r in w13.values())
    for t, need in ((1, 5.0), (4096, 1.5)):
        ours = _find(doc, t, "triton-w4a16", "moe")
        bf = _find(doc, t, "torch-bf16-grouped", "moe")
        ratio = bf["us_median"] / ours["us_median"] if ours and bf else None
        out[f"speedup_vs_bf16_T{t}"] = ratio
        out[f"speedup_vs_bf16_T{t}_ge_{need}"] = ratio is not None and ratio >= need
    return out
