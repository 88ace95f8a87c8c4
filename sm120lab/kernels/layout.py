"""Which thread holds which weight codes and scales in the decode kernel (the notebook-07 diagram).

Triton chooses the register layout of every tensor; for the decode kernel's weight tile
(``[BLOCK_N rows, BLOCK_KW int32 words]``) it is a ``#ttg.blocked`` layout. :func:`decode_tile_layout`
compiles the kernel ahead of time (no GPU) and reads that layout from the TTGIR;
:func:`owner_map` expands it to "thread id per (row, word)"; :func:`plot_decode_tile` draws it.
Each word is 8 E2M1 codes (elements ``8w .. 8w+7`` of the row); word ``w`` uses scale byte
``w // 2`` of the row (16 elements per E4M3 scale).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np

_BLOCKED_RE = re.compile(r"#(blocked\d*) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], threadsPerWarp = "
                         r"\[([\d, ]+)\], warpsPerCTA = \[([\d, ]+)\], order = \[([\d, ]+)\]")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def parse_load_layout(ttgir: str, rows: int, cols: int, elem: str = "i32") -> dict:
    """The blocked layout of the ``tt.load`` of a ``rows x cols`` tensor of ``elem`` in TTGIR text."""
    layouts = {m.group(1): {"sizePerThread": _ints(m.group(2)), "threadsPerWarp": _ints(m.group(3)),
                            "warpsPerCTA": _ints(m.group(4)), "order": _ints(m.group(5))}
               for m in _BLOCKED_RE.finditer(ttgir)}
    pat = re.compile(rf"tt\.load .*: tensor<{rows}x{cols}x!tt\.ptr<{elem}>, #(blocked\d*)>")
    for line in ttgir.splitlines():
        m = pat.search(line)
        if m and m.group(1) in layouts:
            return layouts[m.group(1)]
    raise ValueError(f"no tt.load of tensor<{rows}x{cols}x{elem}> with a blocked layout in the TTGIR")


def owner_map(layout: dict, rows: int, cols: int) -> np.ndarray:
    """Thread id (``32 * warp + lane``) that holds element (r, c) of a 2-D blocked layout, [rows, cols]."""
    spt, tpw, wpc = layout["sizePerThread"], layout["threadsPerWarp"], layout["warpsPerCTA"]
    out = np.zeros((rows, cols), dtype=np.int64)
    for r in range(rows):
        for c in range(cols):
            # position inside one layout tile (the tile repeats over the tensor)
            lr, lc = r % (spt[0] * tpw[0] * wpc[0]), c % (spt[1] * tpw[1] * wpc[1])
            lane_r, lane_c = (lr // spt[0]) % tpw[0], (lc // spt[1]) % tpw[1]
            warp_r, warp_c = lr // (spt[0] * tpw[0]), lc // (spt[1] * tpw[1])
            if layout["order"][0] == 1:  # dim 1 fastest
                lane, warp = lane_r * tpw[1] + lane_c, warp_r * wpc[1] + warp_c
            else:
                lane, warp = lane_c * tpw[0] + lane_r, warp_c * wpc[0] + warp_r
            out[r, c] = 32 * warp + lane
    return out


_COMPILE = """
import json, sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from sm120lab.archflags.kernel_aot import _decode_ptrs, divisibility_attrs, signature
from sm120lab.kernels.moe_configs import DECODE_CONFIGS
from sm120lab.kernels.moe_decode import moe_w4a16_decode_kernel as fn
cfg = DECODE_CONFIGS[sys.argv[1]]
ce = {"FUSE_SILU": True, "MUL_ROUTING": False, "SORTED": cfg.SORTED, "BLOCK_N": cfg.BLOCK_N,
      "BLOCK_KW": cfg.BLOCK_KW, "FAST": True, "DEPTH": cfg.DEPTH}
div = ("N", "KW", "n_up", "stride_am", "stride_we", "stride_wn", "stride_se", "stride_sn", "stride_om")
src = ASTSource(fn=fn, signature=signature(fn, _decode_ptrs(True), ce), constexprs=ce,
                attrs=divisibility_attrs(fn, ce, div))
k = triton.compile(src, target=GPUTarget("cuda", int(sys.argv[2]), 32),
                   options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
print(json.dumps({"ttgir": k.asm["ttgir"]}))
"""


def decode_tile_layout(config: str, cc: int = 120) -> dict:
    """Compile the w13 decode kernel with tile ``config`` for ``sm_<cc>`` (subprocess, no GPU) and
    return ``{"layout", "rows", "words", "num_warps", "triton"}`` for its weight-tile load."""
    from .moe_configs import DECODE_CONFIGS

    if config not in DECODE_CONFIGS:
        raise ValueError(f"config: expected one of {sorted(DECODE_CONFIGS)}, got {config!r}")
    cfg = DECODE_CONFIGS[config]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _COMPILE, config, str(cc)], capture_output=True, text=True,
                         env=env, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"compiling the decode kernel failed: {res.stderr[-800:]}")
    ttgir = json.loads(res.stdout.strip().splitlines()[-1])["ttgir"]
    import triton

    return {"layout": parse_load_layout(ttgir, cfg.BLOCK_N, cfg.BLOCK_KW), "rows": cfg.BLOCK_N,
            "words": cfg.BLOCK_KW, "num_warps": cfg.num_warps, "triton": triton.__version__, "cc": cc}


def plot_decode_tile(info: dict, ax=None, max_words: int = 32):
    """Draw the weight tile: one cell per int32 word (8 codes), coloured and labelled by the thread
    that loads it; row labels say gate/up; the x axis gives the codes and the scale byte per word."""
    import matplotlib.pyplot as plt

    rows, words = info["rows"], min(info["words"], max_words)
    owners = owner_map(info["layout"], info["rows"], info["words"])[:, :words]
    if ax is None:
        _, ax = plt.subplots(figsize=(min(16, 0.55 * words + 2), 0.5 * rows + 1.5))
    ax.imshow(owners % 32, cmap="tab20", aspect="auto", interpolation="nearest")
    for r in range(rows):
        for w in range(words):
            ax.text(w, r, f"t{owners[r, w]}", ha="center", va="center", fontsize=6)
    half = rows // 2
    ax.set_yticks(range(rows))
    ax.set_yticklabels([f"gate n0+{r}" if r < half else f"up n0+{r - half}" for r in range(rows)], fontsize=7)
    ax.set_xticks(range(words))
    ax.set_xticklabels([f"w{w}\ncodes {8 * w}-{8 * w + 7}\nscale {w // 2}" for w in range(words)], fontsize=5)
    ax.set_xlabel("int32 word of the row (8 E2M1 codes; one E4M3 scale byte per 2 words) in one K step")
    ax.set_ylabel("weight row in the program's tile")
    lay = info["layout"]
    ax.set_title(f"decode tile {rows}x{info['words']} words, sm_{info['cc']}, Triton {info['triton']}: "
                 f"sizePerThread {lay['sizePerThread']}, threadsPerWarp {lay['threadsPerWarp']}, "
                 f"warpsPerCTA {lay['warpsPerCTA']}", fontsize=8)
    return ax


def frag_tile_map() -> dict:
    """Who holds what in one 16-row x 64-column tile of the fragment layout (:mod:`.prepack`,
    :mod:`.moe_frag`), measured on :func:`.prepack.canonical_to_frag` itself: each of the tile's 1024
    codes and 64 scale bytes is changed in turn and the one (lane, word) whose bits change is recorded.

    Returns:
        {"lane": int [16, 64], "word": int [16, 64], "register": int [16, 64] (the A register 0..3 of the
        MMA), "scale_lane": int [16, 4]: for (row, scale block) the lane whose scale pair holds that byte}.
    """
    import torch

    from .prepack import FRAG_BIT, canonical_to_frag

    data = torch.zeros(1, 16, 32, dtype=torch.uint8)
    scales = torch.full((1, 16, 4), 0x38, dtype=torch.uint8)
    base, base_s = canonical_to_frag(data, scales)
    lane = np.zeros((16, 64), dtype=np.int64)
    word = np.zeros((16, 64), dtype=np.int64)
    reg = np.zeros((16, 64), dtype=np.int64)
    for r in range(16):
        for c in range(64):
            d = data.clone()
            d[0, r, c // 2] = 1 << (4 * (c % 2))  # bit 0 of code (r, c)
            w, _ = canonical_to_frag(d, scales)
            diff = (w.view(-1) != base.view(-1)).nonzero().view(-1)
            if diff.numel() != 1:
                raise AssertionError(f"code ({r}, {c}) lands in {diff.numel()} words")
            idx = int(diff[0])
            lane[r, c], word[r, c] = idx // 4, idx % 4
            bit = (int(w.view(-1)[idx]) & 0xFFFFFFFF).bit_length() - 1
            reg[r, c] = next(x for x in range(8) if FRAG_BIT[x][0] == bit) // 2
    scale_lane = np.zeros((16, 4), dtype=np.int64)
    for r in range(16):
        for b in range(4):
            sc = scales.clone()
            sc[0, r, b] = 0x40
            _, fs = canonical_to_frag(data, sc)
            diff = (fs.view(-1) != base_s.view(-1)).nonzero().view(-1)
            if diff.numel() != 1:
                raise AssertionError(f"scale ({r}, {b}) lands in {diff.numel()} lanes")
            scale_lane[r, b] = int(diff[0])
    return {"lane": lane, "word": word, "register": reg, "scale_lane": scale_lane}


def plot_frag_tile(m: dict, ax=None):
    """Draw :func:`frag_tile_map`: one 16 x 64 weight tile, colour = lane, text = lane/word."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(16, 4.6))
    ax.imshow(m["lane"], cmap="tab20", aspect="auto", interpolation="nearest")
    for r in range(16):
        for c in range(0, 64, 2):
            ax.text(c + 0.5, r, f"{m['lane'][r, c]}/{m['word'][r, c]}", ha="center", va="center", fontsize=5.5)
    for b in range(1, 4):
        ax.axvline(16 * b - 0.5, color="black", linewidth=1.5)
    ax.axhline(7.5, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("K column within the 64-wide chunk (vertical lines: the 4 scale blocks of 16)")
    ax.set_ylabel("weight row within the 16-row tile")
    ax.set_title("Fragment layout: lane/word holding each code (pairs of columns share a label); "
                 "lane (g, t) = 4g + t holds rows g and g+8 of scale block t")
    return ax
