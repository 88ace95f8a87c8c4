"""One-time preparation of NVFP4 MoE weights for the Triton kernels, and its exact inverse.

The canonical format (:class:`sm120lab.nvfp4.NVFP4Tensor`) stores codes as bytes, scales either
linear ``[E, N, K/16]`` or in the 128x4 swizzled layout, and a global scale per expert. The
kernels want, per expert ``e`` and output row ``n``:

- ``words[e, n, w]`` (int32): the 8 E2M1 codes of elements ``8w .. 8w+7``, element ``8w+j`` in
  bits ``4j .. 4j+3`` (the canonical little-endian byte order, read 32 bits at a time). One
  register holds one dequantization unit (8 codes, half a scale block); one 16-byte load holds 4
  words = 32 codes = exactly two scale blocks, so a thread's loads are contiguous along K and a
  warp's loads are contiguous along the row. Because the bytes are the canonical ones, the MMA
  kernel (:mod:`.moe_gemm`) reads the same buffer as ``uint8 [E, N, K/2]``: no second copy.
- ``scales[e, n, b]`` (uint8 E4M3 bits): linear, row-major (the swizzle is undone once here, not
  on every call).
- ``alpha[e] = 2**6 / gs_e`` (fp32): the decode kernel's outputs are ``sum e2m1 * 2**-6 * SF * a``
  (E2M1 codes are turned into E4M3 patterns of ``e2m1 * 2**-6``, see :mod:`.moe_decode`), so the
  power of two and the global scale become one multiply per output.

The fragment layout (``frag_words`` / ``frag_scales``, for :mod:`.moe_frag`; built when N is a
multiple of 16 and K of 64) stores each 16-row x 64-column weight tile as 32 lanes x 4 int32 words.
Word ``j`` of lane ``(g, t)`` (``g = lane // 4``, ``t = lane % 4``) holds the 8 codes that lane feeds
as the A operand of the ``j``-th ``mma.m16n8k16`` over the tile, with ``c = 16 t + 4 j``:

    x0, x1 = W[g, c : c+2]       x2, x3 = W[g+8, c : c+2]
    x4, x5 = W[g, c+2 : c+4]     x6, x7 = W[g+8, c+2 : c+4]

An MMA's 16 K slots need not be 16 consecutive columns, only the same columns for A and B: here
lane ``t`` covers columns ``16t .. 16t+15`` of the chunk over its 4 words, i.e. exactly one scale
block, so a lane needs one scale pair for all 4 words, and its activations for the 4 MMAs are 16
consecutive bf16 (two 16-byte loads). The 32 code bits are scattered (:data:`FRAG_BIT`) so that
register ``R_r = (x_2r, x_2r+1)`` as bf16x2 bit patterns ``sign<<15 | magnitude<<6`` (the value
``e2m1 * 2**-126``, subnormals included) comes out of 1, 2, 2 and 4 integer instructions (``and``;
``shf`` + ``and``; ``shf`` + ``and``; two ``shf``, ``lop3``, ``and``). ``frag_scales`` int16
``[E, N/16, K/64, 32]`` holds for each lane the E4M3 bytes of rows ``g`` (low byte) and ``g + 8``
(high byte), block ``t`` of the chunk. It is a permutation of the canonical bits:
:func:`frag_to_canonical` inverts it exactly.

``unpack_nvfp4(pack_nvfp4(w))`` returns a tensor equal to ``w`` byte for byte: the same codes,
the same scale bytes in the same layout (swizzle padding included), the same global-scale tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..nvfp4 import NVFP4Tensor, pack_e2m1, unpack_e2m1
from ..nvfp4.swizzle import swizzle_scales_128x4

#: E2M1 codes decode to E4M3 patterns of e2m1 * 2**-6 (the decode kernel), so alpha = 2**6 / gs
DECODE_SHIFT = 64.0
#: the fragment kernel's weights are e2m1 * SF * 2**-7 (bf16 e2m1*2**-126 times SF*2**119), alpha = 2**7 / gs
FRAG_SHIFT = 128.0
#: rows and K columns of one fragment tile (one warp's 4 x mma.m16n8k16 over K)
FRAG_ROWS, FRAG_K = 16, 64
#: rotate-right amounts that give registers R0, R1, R2 (``R = rotr(word, r) & FRAG_MASK``)
FRAG_ROT = (0, 4, 10)
#: R3 = (rotr(word, 14) where FRAG_R3_SELECT else rotr(word, 6)) & FRAG_MASK
FRAG_R3_ROT, FRAG_R3_ROT_SEL, FRAG_R3_SELECT = 6, 14, 0x00400040
#: bf16x2 bits kept per register: sign 15/31, magnitude 6..8 / 22..24
FRAG_MASK = 0x81C081C0


def _frag_bit_table() -> list[list[int]]:
    """FRAG_BIT[x][b]: word bit holding bit ``b`` (0..2 magnitude, 3 sign) of code ``x`` (0..7)."""
    table = []
    for x in range(8):
        r, half = divmod(x, 2)
        row = []
        for b in range(4):
            p = (15 if b == 3 else 6 + b) + 16 * half
            if r < 3:
                rot = FRAG_ROT[r]
            else:
                rot = FRAG_R3_ROT_SEL if (FRAG_R3_SELECT >> p) & 1 else FRAG_R3_ROT
            row.append((p + rot) % 32)
        table.append(row)
    flat = [b for row in table for b in row]
    if sorted(flat) != list(range(32)):  # a permutation of the 32 bits, or the layout is not invertible
        raise AssertionError(f"fragment bit map is not a permutation: {flat}")
    return table


FRAG_BIT = _frag_bit_table()


@dataclass(frozen=True)
class PackedNVFP4:
    """One expert-stacked NVFP4 weight [E, N, K] in the kernels' layout (module docstring).

    Args:
        words: int32 [E, N, K/8], contiguous.
        scales: uint8 [E, N, K/16], contiguous (E4M3 bits, linear).
        alpha: fp32 [E], ``2**6 / global_scale``.
        global_scale: the canonical tensor's global scale, kept as given (exact inverse).
        shape: (E, N, K).
        scale_layout: the canonical tensor's scale layout ("linear" or "swizzled").
        swizzle_pad: for "swizzled", the padded (rows, cols) of the swizzled scales; else None.
        frag_words: int32 [E, N/16, K/64, 32, 4] (module docstring), or None where N % 16 or K % 64.
        frag_scales: int16 [E, N/16, K/64, 32] (one pair per lane), or None.
        frag_alpha: fp32 [E], ``2**7 / global_scale``, or None.
    """

    words: torch.Tensor
    scales: torch.Tensor
    alpha: torch.Tensor
    global_scale: torch.Tensor
    shape: tuple[int, int, int]
    scale_layout: str
    swizzle_pad: tuple[int, int] | None = None
    frag_words: torch.Tensor | None = None
    frag_scales: torch.Tensor | None = None
    frag_alpha: torch.Tensor | None = None

    @property
    def codes_u8(self) -> torch.Tensor:
        """The codes as canonical bytes uint8 [E, N, K/2] (a view of ``words``)."""
        e, n, k = self.shape
        return self.words.view(torch.uint8).view(e, n, k // 2)

    @property
    def nbytes(self) -> int:
        """Bytes one kernel reads for all experts (codes + scales, one layout)."""
        return self.words.numel() * 4 + self.scales.numel()

    @property
    def has_frag(self) -> bool:
        return self.frag_words is not None


@dataclass(frozen=True)
class PackedMoEWeights:
    """Both projections of an MoE layer, prepared once (:func:`prepare_moe_weights`).

    Args:
        w13: gate/up weights [E, 2I, H] (rows [0:I] gate, [I:2I] up).
        w2: down weights [E, H, I].
    """

    w13: PackedNVFP4
    w2: PackedNVFP4

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def hidden(self) -> int:
        return self.w13.shape[2]

    @property
    def intermediate(self) -> int:
        return self.w13.shape[1] // 2


def pack_nvfp4(w: NVFP4Tensor, name: str = "w", frag: bool = True) -> PackedNVFP4:
    """Canonical NVFP4 [E, N, K] -> :class:`PackedNVFP4` (module docstring).

    Args:
        w: NVFP4Tensor of 3 dims, K a multiple of 32, linear or swizzled scales, global scale with
            1 or E values.
        name: argument name used in error messages.
        frag: also build the fragment layout (a second copy of the weight bytes) where N % 16 == 0
            and K % 64 == 0.

    Returns:
        The packed weight (new contiguous tensors; ``w`` is not modified).
    """
    if not isinstance(w, NVFP4Tensor):
        raise TypeError(f"{name}: expected an NVFP4Tensor, got {type(w).__name__}")
    if len(w.shape) != 3:
        raise ValueError(f"{name}: expected shape [E, N, K], got {tuple(w.shape)}")
    e, n, k = (int(x) for x in w.shape)
    if k % 32:
        raise ValueError(f"{name}: K must be a multiple of 32 (two scale blocks per 16-byte load), got {k}")
    if w.data.dtype != torch.uint8 or tuple(w.data.shape) != (e, n, k // 2):
        raise ValueError(f"{name}.data: expected uint8 [{e}, {n}, {k // 2}], got {w.data.dtype} {tuple(w.data.shape)}")
    gs = w.global_scale
    if not isinstance(gs, torch.Tensor):
        gs = torch.tensor(float(gs), dtype=torch.float32)
    gsf = gs.to(device=w.data.device, dtype=torch.float32).reshape(-1)
    if gsf.numel() == 1:
        gsf = gsf.expand(e)
    elif gsf.numel() != e:
        raise ValueError(f"{name}.global_scale: expected 1 or E={e} values, got shape {tuple(gs.shape)}")
    words = w.data.contiguous().view(torch.int32).view(e, n, k // 8)
    lin = w.linear_scale().reshape(e, n, k // 16)
    scales = lin.contiguous().view(torch.uint8)
    pad = None
    if w.scale_layout == "swizzled":
        pad = tuple(int(x) for x in w.scale.shape[-2:])
        if not torch.equal(swizzle_scales_128x4(lin).view(torch.uint8), w.scale.view(torch.uint8)):
            raise ValueError(f"{name}.scale: the swizzled layout's padding must be zero (sm120lab.nvfp4 writes zeros)")
    alpha = (DECODE_SHIFT / gsf).contiguous()
    fw = fs = fa = None
    if frag and n % FRAG_ROWS == 0 and k % FRAG_K == 0:
        _check_frag_scales(w.data, scales, name)
        fw, fs = canonical_to_frag(w.data, scales)
        fa = (FRAG_SHIFT / gsf).contiguous()
    return PackedNVFP4(words=words, scales=scales, alpha=alpha, global_scale=w.global_scale,
                       shape=(e, n, k), scale_layout=w.scale_layout, swizzle_pad=pad,
                       frag_words=fw, frag_scales=fs, frag_alpha=fa)


def _check_frag_scales(data: torch.Tensor, scales: torch.Tensor, name: str) -> None:
    """The fragment kernel turns a scale byte into bf16 ``SF * 2**119`` by exponent arithmetic, which is
    exact for every finite non-negative E4M3 value, and needs zero-scale blocks to hold zero codes."""
    bad = (scales & 0x80).ne(0) | (scales & 0x7F).eq(0x7F)
    if bool(bad.any()):
        raise ValueError(f"{name}.scale: NVFP4 block scales must be finite and non-negative (UE4M3); "
                         f"{int(bad.sum())} are not")
    mag = (unpack_e2m1(data) & 0x7).reshape(*scales.shape, 16)
    orphan = scales.eq(0) & mag.amax(dim=-1).ne(0)
    if bool(orphan.any()):
        raise ValueError(f"{name}: {int(orphan.sum())} blocks have scale 0 but non-zero codes (the value is 0; "
                         "re-quantize, or pass frag=False)")


def _tile_view(x: torch.Tensor, e: int, n: int, kcols: int, per: int):
    """[E, N, kcols] -> [E, N/16, 2 (rh), 8 (g), kcols / per, per] (row = 16 nt + 8 rh + g)."""
    return x.reshape(e, n // FRAG_ROWS, 2, 8, kcols // per, per)


def canonical_to_frag(data: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Canonical codes uint8 [E, N, K/2] and linear scale bytes uint8 [E, N, K/16] -> fragment layout
    (module docstring): int32 words [E, N/16, K/64, 32, 4] and int16 scales [E, N/16, K/64, 32].
    Works one expert at a time (the int64 bit arithmetic needs 8 bytes per code)."""
    e, n, kh = data.shape
    k = kh * 2
    words = torch.empty(e, n // FRAG_ROWS, k // FRAG_K, 32, 4, dtype=torch.int32, device=data.device)
    for i in range(e):
        codes = unpack_e2m1(data[i]).to(torch.int64)
        # [NT, rh, g, KC, t, j, ch, cl] -> [NT, KC, g, t, j, (ch, rh, cl)]
        c = codes.reshape(n // 16, 2, 8, k // 64, 4, 4, 2, 2).permute(0, 3, 2, 4, 5, 6, 1, 7)
        c = c.reshape(n // 16, k // 64, 32, 4, 8)
        acc = torch.zeros(c.shape[:-1], dtype=torch.int64, device=data.device)
        for x in range(8):
            for b in range(4):
                acc |= ((c[..., x] >> b) & 1) << FRAG_BIT[x][b]
        words[i] = (acc - ((acc >> 31) << 32)).to(torch.int32)  # two's complement wrap
    s = _tile_view(scales, e, n, k // 16, 4).permute(0, 1, 4, 3, 5, 2)  # [E, NT, KC, g, t, rh]
    fs = s.contiguous().view(torch.int16).reshape(e, n // 16, k // 64, 32)
    return words, fs


def frag_to_canonical(words: torch.Tensor, fscales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact inverse of :func:`canonical_to_frag`: (codes uint8 [E, N, K/2], scale bytes uint8 [E, N, K/16])."""
    e, nt, kc = words.shape[:3]
    n, k = nt * FRAG_ROWS, kc * FRAG_K
    data = torch.empty(e, n, k // 2, dtype=torch.uint8, device=words.device)
    for i in range(e):
        w = words[i].to(torch.int64) & 0xFFFFFFFF
        codes = torch.zeros(*w.shape, 8, dtype=torch.int64, device=words.device)
        for x in range(8):
            for b in range(4):
                codes[..., x] |= ((w >> FRAG_BIT[x][b]) & 1) << b
        # [NT, KC, g, t, j, ch, rh, cl] -> [NT, rh, g, KC, t, j, ch, cl]
        c = codes.reshape(nt, kc, 8, 4, 4, 2, 2, 2).permute(0, 6, 2, 1, 3, 4, 5, 7).reshape(n, k)
        data[i] = pack_e2m1(c.to(torch.uint8))
    s = fscales.contiguous().view(torch.uint8).reshape(e, nt, kc, 8, 4, 2).permute(0, 1, 5, 3, 2, 4)  # [E,NT,rh,g,KC,t]
    return data, s.reshape(e, n, k // 16).contiguous()


def unpack_nvfp4(p: PackedNVFP4) -> NVFP4Tensor:
    """Exact inverse of :func:`pack_nvfp4`: the canonical tensor, byte for byte."""
    e, n, k = p.shape
    data = p.codes_u8.clone()
    lin = p.scales.view(torch.float8_e4m3fn)
    if p.scale_layout == "swizzled":
        scale = swizzle_scales_128x4(lin)
        if p.swizzle_pad is not None and tuple(scale.shape[-2:]) != p.swizzle_pad:
            raise ValueError(f"swizzled scales re-pad to {tuple(scale.shape[-2:])}, recorded {p.swizzle_pad}")
    else:
        scale = lin.clone()
    return NVFP4Tensor(data=data, scale=scale, global_scale=p.global_scale, shape=torch.Size((e, n, k)),
                       scale_layout=p.scale_layout)


def prepare_moe_weights(w13: NVFP4Tensor, w2: NVFP4Tensor, frag: bool = True) -> PackedMoEWeights:
    """Prepare an MoE layer's NVFP4 weights once for :func:`sm120lab.kernels.moe_layer.fused_moe_packed`.

    Args:
        w13: [E, 2I, H] (gate rows then up rows), any scale layout.
        w2: [E, H, I].
        frag: also build the fragment layout for :mod:`.moe_frag` (see :func:`pack_nvfp4`).

    Returns:
        :class:`PackedMoEWeights`; :func:`unpack_moe_weights` gives back the inputs exactly.
    """
    p13 = pack_nvfp4(w13, "w13", frag)
    p2 = pack_nvfp4(w2, "w2", frag)
    e, n13, h = p13.shape
    if n13 % 2:
        raise ValueError(f"w13: expected [E, 2I, H] with an even row count, got {p13.shape}")
    if p2.shape != (e, h, n13 // 2):
        raise ValueError(f"w2: expected [E={e}, H={h}, I={n13 // 2}], got {p2.shape}")
    return PackedMoEWeights(w13=p13, w2=p2)


def unpack_moe_weights(p: PackedMoEWeights) -> tuple[NVFP4Tensor, NVFP4Tensor]:
    """Exact inverse of :func:`prepare_moe_weights`: (w13, w2)."""
    return unpack_nvfp4(p.w13), unpack_nvfp4(p.w2)
