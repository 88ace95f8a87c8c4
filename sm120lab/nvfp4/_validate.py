"""Input checks shared by the quantizers and dequantizers: dtype/device, finiteness, the fp32
range, block divisibility, the shapes of a quantized tensor's parts."""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_float_tensor(name: str, x: object) -> torch.Tensor:
    """``x`` must be a torch tensor of a floating dtype; raise ``TypeError`` naming ``name`` otherwise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have dtype float32, float16, bfloat16 or float64, got {x.dtype}")
    return x


def _raise_first(name: str, x: torch.Tensor, mask: torch.Tensor, what: str, hint: str) -> None:
    """Raise ``ValueError`` when ``mask`` has a True element: how many, the first one's index and value, ``hint``."""
    count = int(mask.sum())
    if count:
        first = tuple(int(i) for i in torch.nonzero(mask)[0].tolist())
        raise ValueError(f"{name} has {count} {what}; first at index {first}: {x[first].item()!r}. {hint}")


def check_finite(name: str, x: torch.Tensor) -> None:
    """Raise ``ValueError`` naming how many elements are NaN/Inf and the first one's index."""
    _raise_first(name, x, ~torch.isfinite(x), "non-finite value(s) (NaN/Inf)",
                 "Pass allow_nonfinite=True to saturate Inf to +-6 and map NaN to +6.")


def check_fp32_range(name: str, x: torch.Tensor) -> None:
    """Finite values beyond the fp32 range (``|x| > 3.4028e38``, only in float64 input) would turn
    into Inf in the fp32 arithmetic; raise ``ValueError`` naming how many and the first one."""
    if x.dtype != torch.float64:
        return
    big = torch.isfinite(x) & (x.abs() > torch.finfo(torch.float32).max)
    _raise_first(name, x, big, f"finite value(s) beyond the fp32 range (|x| > {torch.finfo(torch.float32).max:.4g})",
                 "The formats compute in fp32: divide x by a power of two first and fold it into the scale.")


def check_dtype(name: str, t: object, dtypes: tuple, what: str) -> torch.Tensor:
    """``t`` must be a torch tensor with one of ``dtypes``; raise ``TypeError`` naming ``name``."""
    if not isinstance(t, torch.Tensor) or t.dtype not in dtypes:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name} must be a {what} torch.Tensor, got {got}")
    return t


def check_shape(name: str, t: torch.Tensor, expected: tuple, why: str) -> None:
    """``t.shape`` must equal ``expected``; raise ``ValueError`` naming both."""
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(expected)} ({why})")


def check_out_dtype(dtype: object, allowed: tuple) -> None:
    if dtype not in allowed:
        names = " or ".join(f"torch.{str(d).split('.')[-1]}" for d in allowed)
        raise TypeError(f"dtype must be {names}, got {dtype}")


def check_block_divisible(name: str, x: torch.Tensor, block: int, fmt: str) -> None:
    """The last dimension must be a positive multiple of the block size."""
    if x.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension, got a scalar")
    k = x.shape[-1]
    if k == 0 or k % block:
        pad = (-k) % block if k else block
        raise ValueError(
            f"{name}: last dimension K={k} is not a positive multiple of the {fmt} block size {block}; "
            f"pad K by {pad} to {k + pad} (zeros are exact in every format)."
        )


def check_same_device(name: str, t: torch.Tensor, ref: torch.Tensor, ref_name: str) -> None:
    if t.device != ref.device:
        raise TypeError(f"{name} is on {t.device} but {ref_name} is on {ref.device}; move them to one device")
