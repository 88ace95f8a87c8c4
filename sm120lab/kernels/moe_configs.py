"""Tile configurations of the NVFP4 MoE GEMMs (the candidate sets).

Every configuration here is compiled ahead of time for sm_120 and sm_121 by
``tests/test_triton_aot.py`` (shared memory must stay <= 101,376 B, SM120's per-block opt-in
limit); the table is recorded in ``data/triton_aot/sm120.json``. Which one runs is chosen by
:mod:`.plan` alone (tile tables in ``data/tiles``, formula fallback); the ``pick_*`` helpers here
call its formula.
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

def pick_decode_configs(num_slots: int) -> tuple[DecodeConfig, DecodeConfig]:
    """(w13, w2) decode tiles of :func:`sm120lab.kernels.plan.decode_tiles` (the plan chooses; kept for callers)."""
    from .plan import decode_tiles

    return decode_tiles(num_slots)


def pick_configs(rows_per_expert: float) -> tuple[GemmConfig, GemmConfig]:
    """(w13, w2) MMA tiles of :func:`sm120lab.kernels.plan.mma_tiles` (the plan chooses; kept for callers)."""
    from .plan import mma_tiles

    return mma_tiles(rows_per_expert)


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
    PREFETCH: bool = False  # w2+sum only: the chunk in flight also carries its activations and expert factor
    PING: int = 0  # 2 or 4: chunks per loop step in their own registers, no loop-carried copy (w2+sum: with PREFETCH)
    SHARE_B: bool = False  # TILES = 2 or 4, PING = 0: every tile multiplies one activation load per lane (inside the MMA asm)

    @property
    def block_m(self) -> int:
        """Slots per sorted block (``moe_sort`` block size)."""
        return 8 * self.CG if self.CG else 8

    @property
    def w2sum_prefetch(self) -> bool:
        """``PREFETCH`` of the w2+sum kernel for this tile: a ``PING`` chunk carries its activations and factor, so
        ``PING`` implies it (the one place this rule is written; the launcher refuses ``ping`` without it)."""
        return bool(self.PREFETCH or self.PING)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        return (f"f{self.TILES}w{self.num_warps}" + ("o" if self.SORTED else "") + (f"c{self.CG}" if self.CG else "")
                + ("p" if self.PREFETCH else "") + (f"d{self.PING}" if self.PING else "") + ("b" if self.SHARE_B else ""))


#: fragment-kernel candidates (every one also compiled ahead of time for sm_120/121)
FRAG_CONFIGS: dict[str, FragConfig] = {c.name: c for c in (
    FragConfig(2, 4), FragConfig(4, 4), FragConfig(2, 2), FragConfig(1, 8), FragConfig(1, 4),
    FragConfig(2, 4, SORTED=True), FragConfig(4, 4, SORTED=True), FragConfig(2, 2, SORTED=True),
    FragConfig(2, 4, SORTED=True, CG=2), FragConfig(2, 4, SORTED=True, CG=4), FragConfig(2, 2, SORTED=True, CG=2),
    FragConfig(2, 2, SORTED=True, CG=4), FragConfig(1, 8, PREFETCH=True),
    FragConfig(2, 4, PING=2), FragConfig(2, 4, PING=4), FragConfig(1, 8, PREFETCH=True, PING=2),
    FragConfig(1, 8, PREFETCH=True, PING=4), FragConfig(2, 2, SORTED=True, PING=2), FragConfig(2, 2, SORTED=True, PING=4),
    FragConfig(2, 4, SHARE_B=True), FragConfig(2, 2, SORTED=True, SHARE_B=True),
    FragConfig(2, 2, SORTED=True, CG=2, SHARE_B=True),
    # fourteenth round: SHARE_B on four tiles (one activation load feeds 16 MMAs) and on the 32-slot tile
    FragConfig(4, 2, SORTED=True, CG=2, SHARE_B=True), FragConfig(2, 2, SORTED=True, CG=4, SHARE_B=True),
    FragConfig(4, 2, SORTED=True, CG=4, SHARE_B=True),
)}

def pick_frag_configs(num_slots: int, num_experts: int = 512, top_k: int = 10, hidden: int = 4096,
                      ) -> tuple[FragConfig, FragConfig]:
    """(w13, w2) fragment tiles of :func:`sm120lab.kernels.plan.frag_tiles` for ``num_slots`` slots of
    uniform routing over ``num_experts`` (the plan chooses from rows per active expert; kept for callers)."""
    from .plan import MoEShape, frag_tiles

    tokens = max(1, num_slots // top_k)
    shape = MoEShape(E=num_experts, N=64, K=hidden, top_k=top_k)
    return frag_tiles(shape.rows_per_expert(tokens), hidden // 16 * tokens)
