"""The production peer: OpenAI ``triton_kernels``' ``matmul_ogs`` (bf16 activations x MXFP4 weights with the
Hopper value and scale layouts), the kernels vLLM runs for gpt-oss on H100/H200.

Composed as vLLM's modular OAI Triton experts compose it (router top-k ids and weights in):

1. routing data from ``(topk_ids, topk_weights)`` (:func:`_routing`): the ids' bitmatrix and its metadata,
   ``make_ragged_tensor_metadata``: expert histogram, the dispatch / combine permutations
   (``GatherIndx`` / ``ScatterIndx``) and the gate scales in expert order;
2. ``matmul_ogs(x, w1, None, routing, gather_indx=..., fused_activation=swiglu(alpha=1.702, limit=7.0))``:
   gathered rows, grouped GEMM, gpt-oss's clamped SwiGLU on interleaved gate/up columns;
3. ``matmul_ogs(h, w2, None, routing, scatter_indx=..., gammas=gate_scal)``: the router weight applied after
   w2 and the sum over the k choices (in the kernel, or its ``reduce``).

The activation is gpt-oss's, ``s = g * sigmoid(1.702 g)`` (g clipped at 7), ``s * (u + 1)`` (u clipped to
[-7, 7]), not the SiLU(g) * u of ours: the same work per element, so the timing compares like with like;
the check compares the peer with a torch reference of its own function (:func:`peer_reference`).
MXFP4 stores 4.25 bits per weight (an E8M0 scale per 32), NVFP4 4.5 (an E4M3 scale per 16): the peer
moves ~6% fewer bytes, so both the time ratio and each format's own byte floor are reported.

The package is third-party code and is not in this repository: the benchmark imports ``triton_kernels``
from the Python path (the Triton repository's ``python/triton_kernels`` of commit
``2760a7e0ef6e202c9b5e526a2ca6d0959a22c5d4``, 2025-11-21, the last before the ``matmul`` refactor, which
matches the Triton 3.6 API; notes/triton_kernels.md says how to get it).

Status (H200, 2026-12-03): measured at every preset and T (``data/bench/``, contender ``oai-matmul-ogs-mxfp4``).
Every step of the composition matches torch on the same MXFP4 values (rel. error 1.6e-3 per GEMM, 2.7e-3 to
3.2e-3 for the layer, Hopper and strided layouts, k = 4 and 10: ``data/bench/aux/peer_probe_h200_2026-12-03.jsonl``
from ``scripts/peer_probe.py``). An earlier composition (routing through the package's ``topk``) failed that
check (data/bench/aux/moe_h200_2026-12-03_peer-attempt_*).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PEER = "oai-matmul-ogs-mxfp4"
SWIGLU_ALPHA = 1.702
SWIGLU_LIMIT = 7.0
#: warps of the Hopper MXFP4 scale layout (the kernel takes its num_warps from it)
NUM_WARPS = 8
#: peer vs its torch reference: MXFP4 values are exact in bf16; bf16 intermediate, output and gate scales
PEER_REL_OK = 3e-2


def peer_unavailable() -> str | None:
    """None when ``triton_kernels`` (with ``matmul_ogs``) imports, else the reason in one line."""
    try:
        from triton_kernels.matmul_ogs import matmul_ogs  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means the peer cannot run
        return f"triton_kernels.matmul_ogs does not import: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def mxfp4_bytes_per_expert(h: int, inter: int, op: str = "moe") -> int:
    """MXFP4 weight bytes per expert: 4 bits per value + one byte per 32 values."""
    w13 = 2 * inter * h // 2 + 2 * inter * h // 32
    w2 = h * inter // 2 + h * inter // 32
    return {"moe": w13 + w2, "w13": w13, "w2": w2}[op]


@dataclass
class PeerWeights:
    """MXFP4 weights in the Hopper layouts: ``w1`` [E, H, 2I] (gate/up columns interleaved), ``w2`` [E, I, H];
    ``ref1`` / ``ref2``: the same values before the layout change (uint8 codes, E8M0 scales), for the check."""

    E: int
    H: int
    I: int  # noqa: E741
    w1: object
    w1_scale: object
    w2: object
    w2_scale: object
    ref1: tuple
    ref2: tuple


def make_peer_weights(e: int, h: int, inter: int, *, seed: int, chunk: int = 16, device="cuda",
                      strided: bool = False) -> PeerWeights:
    """Random MXFP4 expert weights (bf16 N(0, 0.02^2) quantized by ``downcast_to_mxfp`` along K), then the
    Hopper value/scale layouts (``make_default_matmul_mxfp4_w_layout`` / ``..._scale_layout``), or the plain
    strided layout where ``strided`` (the layout check of ``scripts/peer_probe.py``)."""
    from triton_kernels.numerics_details.mxfp import downcast_to_mxfp
    from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor
    from triton_kernels.tensor_details import layout

    gen = torch.Generator(device=device).manual_seed(seed)

    def quant(k, n):
        qs, ss = [], []
        for i in range(0, e, chunk):
            j = min(e, i + chunk)
            w = (torch.randn(j - i, k, n, device=device, generator=gen) * 0.02).to(torch.bfloat16)
            q, s = downcast_to_mxfp(w, torch.uint8, axis=1)
            qs.append(q)
            ss.append(s)
            del w
        # downcast_to_mxfp returns K-major views (K stride 1: wrap_torch_tensor packs along the unit-stride dim);
        # concatenate in that order so the stacked tensors keep it
        return (torch.cat([q.transpose(1, 2) for q in qs]).transpose(1, 2),
                torch.cat([s.transpose(1, 2) for s in ss]).transpose(1, 2))

    vl, vl_opts = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
    sl, sl_opts = layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=NUM_WARPS)
    q1, s1 = quant(h, 2 * inter)
    q2, s2 = quant(inter, h)

    if strided:
        vl, vl_opts, sl, sl_opts = layout.StridedLayout, {}, layout.StridedLayout, {}

    def lay(q, s):
        return (convert_layout(wrap_torch_tensor(q, dtype=FP4), vl, **vl_opts),
                convert_layout(wrap_torch_tensor(s), sl, **sl_opts))

    w1, w1s = lay(q1, s1)
    w2, w2s = lay(q2, s2)
    return PeerWeights(E=e, H=h, I=inter, w1=w1, w1_scale=w1s, w2=w2, w2_scale=w2s, ref1=(q1, s1), ref2=(q2, s2))


def _routing(pw: PeerWeights, ids: torch.Tensor, tw: torch.Tensor):
    """(RoutingData, GatherIndx, ScatterIndx) from the router's top-k ids and weights (module docstring, step 1).

    With ``flat = ids.reshape(-1)`` (slot ``s = t * k + j``): ``col = argsort(flat, stable)`` (slot of each
    expert-ordered row: the gather source and scatter destination), ``row = argsort(col)`` (its inverse),
    ``col_sum[e]`` = slots routed to ``e`` (a scatter-add, no host sync, so the layer can be captured in a
    CUDA graph at any k), the ragged metadata from the package's ``make_ragged_tensor_metadata`` and the
    gate scales in expert order ``tw.flat[col]``. The same definition as the package's bitmatrix metadata
    (equal under the CPU interpreter for k = 4, 8; on the H200 every step matches torch,
    ``scripts/peer_probe.py``), in torch ops, for any k (the package's ``topk`` and bitmatrix kernels need a
    power-of-two k)."""
    from triton_kernels.matmul_ogs import GatherIndx, RoutingData, ScatterIndx
    from triton_kernels.tensor_details.ragged_tensor import make_ragged_tensor_metadata

    t, k = ids.shape
    flat = ids.reshape(-1).long()
    col = torch.argsort(flat, stable=True).to(torch.int32)
    row = torch.argsort(col, stable=True).to(torch.int32)
    col_sum = torch.zeros(pw.E, dtype=torch.int32, device=ids.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    ragged = make_ragged_tensor_metadata(col_sum, t * k)
    gate_scal = tw.reshape(-1).to(torch.bfloat16)[col.long()]
    rdata = RoutingData(gate_scal, ragged.slice_sizes, pw.E, k, ragged)
    return rdata, GatherIndx(col, row), ScatterIndx(row, col)


def peer_moe(pw: PeerWeights, x: torch.Tensor, ids: torch.Tensor, tw: torch.Tensor) -> torch.Tensor:
    """The peer's MoE layer -> bf16 [T, H] (module docstring, steps 1-3)."""
    import triton_kernels.swiglu
    from triton_kernels.matmul_ogs import FnSpecs, FusedActivation, PrecisionConfig, matmul_ogs

    rdata, gather, scatter = _routing(pw, ids, tw)
    act = FusedActivation(FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit"), reduction_n=2),
                          (SWIGLU_ALPHA, SWIGLU_LIMIT))
    h = matmul_ogs(x, pw.w1, None, rdata, gather_indx=gather, precision_config=PrecisionConfig(weight_scale=pw.w1_scale),
                   fused_activation=act)
    return matmul_ogs(h, pw.w2, None, rdata, scatter_indx=scatter,
                      precision_config=PrecisionConfig(weight_scale=pw.w2_scale), gammas=rdata.gate_scal)


def peer_reference(pw: PeerWeights, x: torch.Tensor, ids: torch.Tensor, tw: torch.Tensor) -> torch.Tensor:
    """The peer's function in torch (fp32, per routed slot) on the same MXFP4 values -> fp32 [T, H]."""
    from triton_kernels.numerics_details.mxfp import upcast_from_mxfp

    t, k = ids.shape
    out = torch.zeros(t, pw.H, dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        w1 = upcast_from_mxfp(pw.ref1[0][e:e + 1], pw.ref1[1][e:e + 1], torch.bfloat16, axis=1)[0].float()
        w2 = upcast_from_mxfp(pw.ref2[0][e:e + 1], pw.ref2[1][e:e + 1], torch.bfloat16, axis=1)[0].float()
        tok, j = torch.nonzero(ids == e, as_tuple=True)
        hh = x[tok].float() @ w1
        g = hh[:, 0::2].clamp(max=SWIGLU_LIMIT)
        u = hh[:, 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
        s = g * torch.sigmoid(SWIGLU_ALPHA * g)
        inter = (s * (u + 1)).to(torch.bfloat16).float()
        out.index_add_(0, tok, (inter @ w2) * tw[tok, j].float().unsqueeze(1))
    return out
