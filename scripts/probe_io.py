"""Shared plumbing of the H200 probe scripts (``frag_depth_probe``, ``prefill_probe``, ``w2sum_ab_probe``,
``ping_probe``, ``decode_warps_probe``): the JSON-lines record, the per-preset loop under a time budget and one
decode case per T."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import torch

from sm120lab.bench.ceilings import measure_copy_gbps
from sm120lab.bench.moe_problem import make_bench_layer, uniform_routing
from sm120lab.envinfo import collect
from sm120lab.kernels.plan import MoEShape
from sm120lab.kernels.prepack import prepare_moe_weights


def command_line(script: str, args) -> str:
    """The command that reproduces ``args`` (positional ``out`` first, flags as given, ``store_true`` bare)."""
    parts = [f"PYTHONPATH=. python3 scripts/{script}", args.out]
    for k, v in vars(args).items():
        if k == "out" or v is False:
            continue
        parts.append(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}"))
    return " ".join(parts)


def open_record(script: str, args) -> tuple[Callable[[dict], None], float, float]:
    """(emit, copy GB/s, start time): ``emit`` prints a JSON line and appends it to ``args.out`` as it goes; the
    first line holds the environment, the copy bandwidth measured here and the command. TF32 is turned off
    (the fp32 references stay fp32)."""
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    sink = open(args.out, "a")

    def emit(r: dict) -> None:
        print(json.dumps(r), flush=True)
        sink.write(json.dumps(r) + "\n")
        sink.flush()

    copy = measure_copy_gbps()["copy_GBps"]
    emit({"env": collect(), "copy_GBps": copy, "command": command_line(script, args)})
    return emit, copy, t0


def preset_layers(shapes: dict, names, t0: float, budget_s: float, emit, *, seed: int = 5,
                  input_seed: int = 9) -> Iterator[tuple]:
    """(name, (E, k, H, I), layer, packed, gen, shape) per preset in ``names``: random NVFP4 weights of ``seed``,
    prepared, a CUDA generator of ``input_seed`` for the inputs and the plan's ``MoEShape``; stops (and says so)
    once ``budget_s`` seconds have passed since ``t0``; frees each layer after use."""
    for name in names:
        e, k, h, inter = shapes[name]
        if time.time() - t0 > budget_s:
            emit({"stopped": f"budget {budget_s} s spent before {name}"})
            return
        layer = make_bench_layer(e, k, h, inter, seed=seed, bf16=False, fp8=False)
        packed = prepare_moe_weights(layer.w13, layer.w2)
        gen = torch.Generator(device="cuda").manual_seed(input_seed)
        yield name, (e, k, h, inter), layer, packed, gen, MoEShape(E=e, N=inter, K=h, top_k=k)
        del layer, packed
        torch.cuda.empty_cache()


def decode_case(layer, k: int, h: int, t: int, gen) -> dict:
    """One case at T = ``t``: uniform routing and bf16 activations drawn from ``gen`` (in that order), the flat
    routing (``s = t k`` slots), the active experts and their NVFP4 weight bytes per op (``b13``, ``b2``)."""
    ids, tw = uniform_routing(t, layer.E, k, gen=gen)
    x = torch.randn(t, h, device="cuda", generator=gen).to(torch.bfloat16)
    n_active = int(torch.unique(ids).numel())
    return {"ids": ids, "tw": tw, "x": x, "s": t * k, "twf": tw.reshape(-1), "flat": ids.reshape(-1),
            "n_active": n_active, "b13": layer.nvfp4_bytes_per_expert("w13") * n_active,
            "b2": layer.nvfp4_bytes_per_expert("w2") * n_active}
