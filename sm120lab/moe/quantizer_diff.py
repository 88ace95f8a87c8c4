"""Byte-for-byte diff of an activation NVFP4 quantizer against :func:`sm120lab.nvfp4.quantize_nvfp4`.

Compared: the packed E2M1 bytes, the unpacked 4-bit codes, and the E4M3 block-scale bytes (in the
layout the quantizer claims: linear [M, K/16] or 128x4-swizzled, padding included). Verdicts:
``correct`` (every byte equal), ``degraded`` (>= 99.9% of codes and scales equal and every differing
code one step away: rounding-mode differences such as approximate reciprocals), ``garbage``
(anything else, e.g. chance-level agreement). A quantizer that returns without error and yields
``garbage`` is called out as a SILENT failure: FlashInfer 0.6.5's ``fp4_quantize`` on an H200 (SM90)
did exactly that (``data/correctness/h200_fp4_quantize.json``, ``notes/correctness.md``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from sm120lab.nvfp4 import quantize_nvfp4, unpack_e2m1
from sm120lab.nvfp4.quantize import default_global_scale

from .verdict import Verdict

__all__ = ["QuantizerDiff", "compare_nvfp4_bytes", "diff_quantizer", "flashinfer_fp4_quantize_diffs", "self_check_diffs",
           "triton_quantize_diffs"]


@dataclass
class QuantizerDiff:
    name: str
    layout: str
    status: str                 # "ran" | "skipped" | "error"
    reason: str = ""
    byte_match: float = float("nan")
    code_match: float = float("nan")
    code_one_step: float = float("nan")   # fraction of differing codes that are one E2M1 step apart
    scale_match: float = float("nan")
    shape_ok: bool = True
    verdict: Verdict | str = ""
    silent: bool = False
    note: str = ""

    def as_dict(self) -> dict:
        from .jsonable import jsonable

        return jsonable(asdict(self))


def _u8(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t.view(torch.uint8).reshape(-1).cpu()


def compare_nvfp4_bytes(codes: torch.Tensor, scales: torch.Tensor, ref_codes: torch.Tensor, ref_scales: torch.Tensor,
                        *, name: str = "quantizer", layout: str = "linear") -> QuantizerDiff:
    """Compare packed codes [M, K/2] and scale bytes against the reference ones (any 1-byte dtypes)."""
    a, b = _u8(codes), _u8(ref_codes)
    sa, sb = _u8(scales), _u8(ref_scales)
    res = QuantizerDiff(name=name, layout=layout, status="ran")
    if a.numel() != b.numel() or sa.numel() != sb.numel():
        res.shape_ok = False
        res.verdict = Verdict.GARBAGE
        res.note = f"size mismatch: codes {a.numel()} vs {b.numel()} bytes, scales {sa.numel()} vs {sb.numel()}"
        return res
    res.byte_match = float((a == b).double().mean()) if a.numel() else 1.0
    ca, cb = unpack_e2m1(a), unpack_e2m1(b)
    same = ca == cb
    res.code_match = float(same.double().mean()) if ca.numel() else 1.0
    diff = ~same
    if bool(diff.any()):
        # one step: same sign, adjacent magnitude codes
        one = ((ca[diff] & 8) == (cb[diff] & 8)) & (((ca[diff] & 7).int() - (cb[diff] & 7).int()).abs() == 1)
        res.code_one_step = float(one.double().mean())
    else:
        res.code_one_step = 1.0
    res.scale_match = float((sa == sb).double().mean()) if sa.numel() else 1.0
    if res.byte_match == 1.0 and res.scale_match == 1.0:
        res.verdict = Verdict.CORRECT
    elif res.code_match >= 0.999 and res.scale_match >= 0.999 and res.code_one_step == 1.0:
        res.verdict = Verdict.DEGRADED
    else:
        res.verdict = Verdict.GARBAGE
    return res


def diff_quantizer(fn, x: torch.Tensor, gscale: torch.Tensor, *, layout: str, name: str) -> QuantizerDiff:
    """Run ``fn(x, gscale) -> (packed codes, scales)`` and diff it against ``quantize_nvfp4``."""
    ref = quantize_nvfp4(x, gscale.reshape(()) if gscale.numel() == 1 else gscale, scale_layout=layout)
    try:
        codes, scales = fn(x, gscale)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
    except Exception as exc:  # report, never a traceback
        msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return QuantizerDiff(name=name, layout=layout, status="error", reason=msg, verdict=Verdict.ERROR)
    res = compare_nvfp4_bytes(codes, scales, ref.data, ref.scale, name=name, layout=layout)
    if res.verdict == Verdict.GARBAGE:
        res.silent = True
        res.note = (res.note + "; " if res.note else "") + "returned without error but the bytes are wrong: SILENT failure"
    return res


def self_check_diffs(x: torch.Tensor, gscale: torch.Tensor,
                     layouts: tuple[str, ...] = ("linear", "swizzled")) -> list[QuantizerDiff]:
    """The diff's two controls per scale layout: ``quantize_nvfp4`` against itself (must be ``correct``,
    every byte equal) and a quantizer that returns without writing its outputs (all-zero codes and
    scales: ``garbage``, a SILENT failure, what FlashInfer 0.6.5's ``fp4_quantize`` does on SM90).

    Args:
        x: activations [M, K] (K a multiple of 16).
        gscale: the per-tensor global scale (one element).
        layouts: the scale layouts to diff in.

    Returns:
        Per layout: the self diff, then the unwritten-output diff.
    """
    g = gscale.reshape(())
    out = []
    for layout in layouts:
        def ours(a, _g, lay=layout):
            q = quantize_nvfp4(a, g, scale_layout=lay)
            return q.data, q.scale

        ref = quantize_nvfp4(x, g, scale_layout=layout)
        out.append(diff_quantizer(ours, x, gscale, layout=layout, name="sm120lab (self)"))
        out.append(diff_quantizer(lambda a, _g, q=ref: (torch.zeros_like(q.data), torch.zeros_like(q.scale)),
                                  x, gscale, layout=layout, name="unwritten output"))
    return out


def flashinfer_fp4_quantize_diffs(x: torch.Tensor, gscale: torch.Tensor | None = None) -> list[QuantizerDiff]:
    """FlashInfer ``fp4_quantize`` (linear and swizzled 128x4 layouts) vs ``quantize_nvfp4``.

    ``x``: bf16 [M, K] on a CUDA device; ``gscale`` defaults to 448*6/amax(x) (fp32 [1]). Returns one
    skipped entry with a one-line reason where FlashInfer or a GPU is missing.
    """
    from importlib import metadata

    if not x.is_cuda:
        return [QuantizerDiff(name="flashinfer.fp4_quantize", layout="-", status="skipped", reason="needs a CUDA GPU")]
    try:
        from flashinfer import fp4_quantize
        version = metadata.version("flashinfer-python")
    except Exception as exc:  # ImportError or a broken install
        return [QuantizerDiff(name="flashinfer.fp4_quantize", layout="-", status="skipped",
                              reason=f"flashinfer not importable ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")]
    if gscale is None:
        gscale = default_global_scale(x).reshape(1)
    gscale = gscale.float().reshape(1).to(x.device)
    cap = torch.cuda.get_device_capability(x.device)
    out = []
    for layout in ("linear", "swizzled"):
        fn = lambda a, g, sw=(layout == "swizzled"): fp4_quantize(a, g, 16, False, sw)  # noqa: E731
        res = diff_quantizer(fn, x, gscale, layout=layout, name=f"flashinfer {version} fp4_quantize")
        if cap[0] < 10:
            known = ("FlashInfer 0.6.x compiles fp4_quantize's e2m1 conversion out below SM100 "
                     "(#if __CUDA_ARCH__ >= 1000 ... #else return 0): garbage expected on "
                     f"SM{cap[0]}{cap[1]}")
            res.note = (res.note + "; " if res.note else "") + known
        out.append(res)
    return out


def triton_quantize_diffs(x: torch.Tensor, gscale: torch.Tensor) -> list[QuantizerDiff]:
    """The workbook's own Triton activation quantizer (W4A4's a1/a2,
    :func:`sm120lab.kernels.moe_layer.quantize_rows_nvfp4`, linear scales) vs ``quantize_nvfp4``, compiled by
    this machine's Triton for its GPU. Its contract is ``correct`` (every byte): under Triton 3.6 on an H200 an
    approximate division made it ``degraded`` (51 of 24,576 codes one step off at rounding ties), until the
    kernel used ``tl.div_rn`` (``notes/triton_kernels.md``, seventh round).

    Args:
        x: activations [M, K] (K a multiple of 16) on a CUDA device.
        gscale: the per-tensor global scale (one element).

    Returns:
        One entry; ``skipped`` with a one-line reason without a CUDA GPU or Triton.
    """
    name = "sm120lab Triton quantizer"
    if not x.is_cuda:
        return [QuantizerDiff(name=name, layout="linear", status="skipped", reason="needs a CUDA GPU")]
    try:
        import triton

        from sm120lab.kernels.moe_layer import quantize_rows_nvfp4
    except Exception as exc:  # ImportError or a broken install
        return [QuantizerDiff(name=name, layout="linear", status="skipped",
                              reason=f"triton not importable ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")]
    g = gscale.float().reshape(1).to(x.device)
    res = diff_quantizer(lambda a, _g: quantize_rows_nvfp4(a.contiguous(), g), x, g, layout="linear",
                         name=f"{name} (Triton {triton.__version__})")
    return [res]
