"""Tile configurations of the NVFP4 MoE GEMMs, and the rule that picks one.

Every configuration here is compiled ahead of time for sm_120 and sm_121 by
``tests/test_triton_aot.py`` (shared memory must stay <= 101,376 B, SM120's per-block opt-in
limit); the table is recorded in ``data/triton_aot/sm120.json``.

Decode (few rows per expert): BLOCK_M = 16 (the mma minimum) and narrow N tiles, so that the
(experts x N-tiles) grid covers all SMs and every SM streams weight bytes. Prefill: larger
M and N tiles to reuse each dequantized weight tile across more rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GemmConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int
    FAST: bool = False  # inline-PTX dequant (GPU, sm_90+; not under the interpreter)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        return (f"m{self.BLOCK_M}n{self.BLOCK_N}k{self.BLOCK_K}w{self.num_warps}s{self.num_stages}"
                + ("f" if self.FAST else ""))


#: the candidate set (the "autotune configurations"); names are stable keys for results
CONFIGS: dict[str, GemmConfig] = {c.name: c for c in (
    # decode (BLOCK_M = 16); FAST = inline-PTX dequant (GPU only; the interpreter runs FAST=False)
    GemmConfig(16, 32, 256, 4, 3),
    GemmConfig(16, 64, 128, 4, 4),
    GemmConfig(16, 32, 128, 4, 3, FAST=True),
    GemmConfig(16, 64, 64, 4, 3, FAST=True),
    GemmConfig(16, 64, 128, 4, 4, FAST=True),
    # prefill (m64n64k128w4s3, m128n64k64w8s2f and m128n128k64w8s2f were dropped: they spill
    # registers on sm_120/121 with Triton 3.9, data/triton_aot/sm120.json of 2026-12-03)
    GemmConfig(32, 64, 128, 4, 3),
    GemmConfig(32, 64, 128, 4, 3, FAST=True),
    GemmConfig(128, 64, 64, 8, 2),
    GemmConfig(128, 64, 64, 8, 3),
    GemmConfig(64, 64, 64, 4, 4),
)}


@dataclass(frozen=True)
class DecodeConfig:
    """Tile of the decode kernel (:mod:`.moe_decode`): ``BLOCK_N`` weight rows per program (w13:
    half gate, half up), ``BLOCK_KW`` int32 words (8 codes each) per row per loop step;
    ``SORTED``: rows come from the expert sort (one expert's rows back to back) instead of token order;
    ``DEPTH``: weight tiles loaded ahead of the one being computed (1 or 2)."""

    BLOCK_N: int
    BLOCK_KW: int
    num_warps: int
    num_stages: int = 1
    SORTED: bool = False
    DEPTH: int = 1

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        return (f"d{self.BLOCK_N}x{self.BLOCK_KW}w{self.num_warps}s{self.num_stages}" + ("o" if self.SORTED else "")
                + (f"p{self.DEPTH}" if self.DEPTH != 1 else ""))


#: decode candidates (every one also compiled ahead of time for sm_120/121)
DECODE_CONFIGS: dict[str, DecodeConfig] = {c.name: c for c in (
    DecodeConfig(8, 64, 2),
    DecodeConfig(16, 64, 4),
    DecodeConfig(16, 64, 2),
    DecodeConfig(8, 64, 2, DEPTH=2),
    DecodeConfig(8, 32, 1, DEPTH=2),
    DecodeConfig(16, 64, 2, DEPTH=2),
    DecodeConfig(16, 32, 2, DEPTH=2),
    DecodeConfig(16, 64, 4, SORTED=True),
)}

#: the decode kernel serves up to this many rows per active expert (it re-reads an expert's weights
#: per row: at T=64 with E=512, k=10, 1.25 rows per expert, it measured 1.6x slower than the MMA kernel)
DECODE_MAX_ROWS_PER_EXPERT = 1.0


def pick_decode_configs(num_slots: int) -> tuple[DecodeConfig, DecodeConfig]:
    """(w13, w2) decode configs: token order (no sort launch) up to 160 slots, else sorted."""
    if num_slots <= 160:
        return DECODE_CONFIGS["d8x64w2s1"], DECODE_CONFIGS["d8x64w2s1"]
    return DECODE_CONFIGS["d16x64w4s1o"], DECODE_CONFIGS["d16x64w4s1o"]


def pick_configs(rows_per_expert: float) -> tuple[GemmConfig, GemmConfig]:
    """(w13 config, w2 config) by the mean number of rows an active expert receives.

    Both share BLOCK_M (one token sort serves both GEMMs). Chosen from the H200 sweeps of
    data/bench/ (notes/triton_kernels.md); ``sm120lab bench moe`` re-tunes per T.
    """
    if not rows_per_expert > 0:
        raise ValueError(f"rows_per_expert must be > 0, got {rows_per_expert}")
    if rows_per_expert <= 16:
        return CONFIGS["m16n64k128w4s4"], CONFIGS["m16n64k128w4s4"]
    if rows_per_expert <= 48:
        return CONFIGS["m32n64k128w4s3f"], CONFIGS["m32n64k128w4s3f"]
    # T=4096 on the H200 (data/bench/moe_h200_2026-12-03.json sweep): s3 6.77 ms, s2 7.59 ms, m64n64k64w4s4 8.28 ms
    return CONFIGS["m128n64k64w8s3"], CONFIGS["m128n64k64w8s3"]


@dataclass(frozen=True)
class FragConfig:
    """Tile of the fragment kernel (:mod:`.moe_frag`): ``TILES`` 16-row weight tiles per program (w13:
    half gate, half up), ``num_warps`` warps splitting K; ``SORTED``: columns are the 8 slots of one
    expert block (``moe_sort(ids, E, 8)``) instead of one slot per program. Unsorted w2 runs
    :func:`.moe_frag.moe_w4a16_frag_w2sum_kernel` (w2 and the k-sum in one launch); w13 needs an even
    ``TILES`` (gate and up tiles)."""

    TILES: int
    num_warps: int
    SORTED: bool = False
    CG: int = 0  # > 0: the wide kernel, 8 * CG slots of one expert per program (SORTED implied)
    num_stages: int = 1  # the kernel pipelines by hand (one chunk in flight); Triton's pipeliner is not used

    @property
    def block_m(self) -> int:
        """Slots per sorted block (``moe_sort`` block size)."""
        return 8 * self.CG if self.CG else 8

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        return f"f{self.TILES}w{self.num_warps}" + ("o" if self.SORTED else "") + (f"c{self.CG}" if self.CG else "")


#: fragment-kernel candidates (every one also compiled ahead of time for sm_120/121)
FRAG_CONFIGS: dict[str, FragConfig] = {c.name: c for c in (
    FragConfig(2, 4), FragConfig(4, 4), FragConfig(2, 2), FragConfig(1, 8), FragConfig(1, 4),
    FragConfig(2, 4, SORTED=True), FragConfig(4, 4, SORTED=True), FragConfig(2, 2, SORTED=True),
    FragConfig(2, 4, SORTED=True, CG=2), FragConfig(2, 4, SORTED=True, CG=4), FragConfig(2, 2, SORTED=True, CG=2),
    FragConfig(2, 2, SORTED=True, CG=4),
)}

#: the fragment kernels serve up to this many rows per active expert (decode: 8 slot columns per MMA;
#: wide: 32 per program); above it the MMA kernel of moe_gemm runs. H200, E=512, k=10
#: (scripts/frag_probe.py): at T=1024 (20 rows) the wide kernel took 3.03 ms against 3.69 ms, at T=4096
#: (80 rows) 8.94 ms against 7.58 ms
FRAG_MAX_ROWS_PER_EXPERT = 24.0
#: up to this many slots the fragment kernel runs one slot per program (no sort launch)
FRAG_UNSORTED_MAX_SLOTS = 160


def pick_frag_configs(num_slots: int) -> tuple[FragConfig, FragConfig]:
    """(w13, w2) fragment configs, the winners of the H200 sweep at E=512, k=10
    (data/bench/moe_h200_2026-12-03.json "sweep"): one slot per program up to
    ``FRAG_UNSORTED_MAX_SLOTS`` (w2 through the w2+sum kernel), 8-slot groups up to 2,560 slots,
    32-slot groups of the wide kernel above."""
    if num_slots <= 16:
        return FRAG_CONFIGS["f2w4"], FRAG_CONFIGS["f1w8"]
    if num_slots <= 64:
        return FRAG_CONFIGS["f2w4"], FRAG_CONFIGS["f2w4"]
    if num_slots <= FRAG_UNSORTED_MAX_SLOTS:
        return FRAG_CONFIGS["f2w4"], FRAG_CONFIGS["f2w2"]
    if num_slots <= 1024:
        return FRAG_CONFIGS["f2w2o"], FRAG_CONFIGS["f2w2o"]
    if num_slots <= 2560:
        return FRAG_CONFIGS["f4w4o"], FRAG_CONFIGS["f2w2o"]
    return FRAG_CONFIGS["f2w2oc4"], FRAG_CONFIGS["f2w2oc4"]
