#!/usr/bin/env python3
"""Locate a failure of the production peer (``sm120lab.bench.peer``) step by step on a GPU.

Usage on the device machine (repo root, ``triton_kernels`` on the path):
    PYTHONPATH=.:peer_src python3 scripts/peer_probe.py --out $OUT/peer_probe.jsonl

For the Hopper and the plain strided weight layouts, at a small shape and at gpt-oss-120b's, each step
against torch on the same MXFP4 values (rel. error = ||got - ref|| / ||ref||):

1. ``w1``: one GEMM through ``matmul_ogs`` with the routing of :func:`.peer._routing` and the gather, no
   activation (the weight values and layout alone);
2. ``w1+swiglu``: the same with the fused activation;
3. ``moe``: the whole layer (:func:`.peer.peer_moe` vs :func:`.peer.peer_reference`).

One JSON line per step (its error, or the exception in one line), written as it goes.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

import torch

from sm120lab.nvfp4.quant_error import relative_error


def _gemm(pw, x, ids, tw, act: bool):
    """``matmul_ogs`` of ``x`` with ``w1`` over the routed slots (rows in expert order) and its torch value."""
    import triton_kernels.swiglu
    from triton_kernels.matmul_ogs import FnSpecs, FusedActivation, PrecisionConfig, matmul_ogs
    from triton_kernels.numerics_details.mxfp import upcast_from_mxfp

    from sm120lab.bench import peer

    t, k = ids.shape
    rdata, gather, _ = peer._routing(pw, ids, tw)
    kw = {}
    if act:
        kw["fused_activation"] = FusedActivation(
            FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit"), reduction_n=2),
            (peer.SWIGLU_ALPHA, peer.SWIGLU_LIMIT))
    y = matmul_ogs(x, pw.w1, None, rdata, gather_indx=gather,
                   precision_config=PrecisionConfig(weight_scale=pw.w1_scale), **kw)
    y = y.reshape(t * k, -1).float()
    where = torch.argsort(gather.src_indx.long())  # flat slot tok * k + j -> its row of y
    ref = torch.empty_like(y)
    for tok in range(t):
        for j in range(k):
            e = int(ids[tok, j])
            w = upcast_from_mxfp(pw.ref1[0][e:e + 1], pw.ref1[1][e:e + 1], torch.bfloat16, axis=1)[0].float()
            row = x[tok].float() @ w
            if act:
                g = row[0::2].clamp(max=peer.SWIGLU_LIMIT)
                u = row[1::2].clamp(-peer.SWIGLU_LIMIT, peer.SWIGLU_LIMIT)
                row = g * torch.sigmoid(peer.SWIGLU_ALPHA * g) * (u + 1)
            ref[where[tok * k + j]] = row
    return y, ref


def _probe(pw, case: dict, t: int, seed: int, emit) -> None:
    """Steps 1-3 of the module docstring at ``t`` tokens, one JSON line each."""
    from sm120lab.bench import peer

    gen = torch.Generator(device="cuda").manual_seed(seed + t)
    x = torch.randn(t, pw.H, device="cuda", generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(pw.E, device="cuda", generator=gen)[:case["k"]] for _ in range(t)])
    ids = ids.to(torch.int32)
    tw = torch.softmax(torch.randn(t, case["k"], device="cuda", generator=gen), -1)
    steps = {"w1": lambda: _gemm(pw, x, ids, tw, False), "w1+swiglu": lambda: _gemm(pw, x, ids, tw, True),
             "moe": lambda: (peer.peer_moe(pw, x, ids, tw), peer.peer_reference(pw, x, ids, tw))}
    for label, fn in steps.items():
        try:
            got, ref = fn()
            torch.cuda.synchronize()
            emit({**case, "T": t, "step": label, "rel": relative_error(ref, got), "finite": bool(torch.isfinite(got).all())})
        except Exception as exc:  # noqa: BLE001 - the probe reports every failure and goes on
            emit({**case, "T": t, "step": label, "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                  "where": traceback.format_exc().splitlines()[-3][:200]})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=20261203)
    args = p.parse_args()
    from sm120lab.bench import peer

    fh = open(args.out, "a")

    def emit(row):
        row["t"] = round(time.time(), 1)
        print(json.dumps(row), flush=True)
        fh.write(json.dumps(row) + "\n")
        fh.flush()

    shapes = {"small": (8, 512, 512, 4), "gpt-oss-120b": (128, 2880, 2880, 4), "qwen3-next": (512, 2048, 512, 10)}
    for name, (e, h, inter, k) in shapes.items():
        for strided in (False, True):
            case = {"shape": name, "k": k, "layout": "strided" if strided else "hopper"}
            try:
                pw = peer.make_peer_weights(e, h, inter, seed=args.seed, strided=strided)
            except Exception as exc:  # noqa: BLE001
                emit({**case, "step": "weights", "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                continue
            for t in (4, 64):
                _probe(pw, case, t, args.seed, emit)
            del pw
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
