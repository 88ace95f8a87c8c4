"""Error metrics of one backend output against the reference, in fp64.

For output O and reference R ([T, H]), with D = O - R:

- ``rel_fro``   = ||D||_F / ||R||_F (``inf`` if any element is NaN/Inf/untouched)
- ``cosine``    = <O, R> / (||O|| ||R||) over the finite, written rows
- ``max_abs``   = max |D| over the finite, written elements
- ``nan``/``inf``: non-finite elements; ``untouched``: elements still equal to the poison sentinel
- ``zero_rows``: tokens whose output row is exactly 0 while the reference row is not
- per token: ||D_t|| / ||R_t|| (``inf`` for a row holding NaN/Inf/untouched)

Per-(token, slot) "cells" come from the per-slot probes (routing weights one-hot on slot j, so
O[t] is expert e_{t,j}'s output alone). Two per-cell numbers:

- ``rel``: ||O - R|| / ||R|| against the exact reference (what NVFP4 costs; W4A4 noise is
  heavy-tailed per cell: up to ~1.3 on the tiny preset for emulated-w4a4 itself);
- ``dev``: ||O - twin|| / max(||twin||, 0.25 median_e ||twin||) against the backend's expected
  numerics ("twin": emulated-w4a4 for a W4A4 backend, the reference otherwise): ~0 for a correct
  backend whatever the NVFP4 noise, O(1) for a fault. Verdicts and localization use ``dev``.

Per expert the cells aggregate as sqrt(sum ||D||^2 / sum ||R||^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .backends.base import SENTINEL

__all__ = ["DEV_FLOOR", "OutputDiff", "CellDiff", "cell_rel", "output_diff", "cell_diff", "expert_errors"]


@dataclass
class OutputDiff:
    rel_fro: float
    rel_fro_finite: float
    cosine: float
    max_abs: float
    nan: int
    inf: int
    untouched: int
    zero_rows: list[int]
    per_token: np.ndarray      # float64 [T]

    def summary(self) -> dict:
        return {"rel_fro": self.rel_fro, "rel_fro_finite": self.rel_fro_finite, "cosine": self.cosine,
                "max_abs": self.max_abs, "nan": self.nan, "inf": self.inf, "untouched": self.untouched,
                "zero_rows": len(self.zero_rows)}


@dataclass
class CellDiff:
    num: np.ndarray      # float64 [T, k]: ||O - R||^2 per cell (inf when the row is bad)
    den: np.ndarray      # float64 [T, k]: ||R||^2 per cell
    bad: np.ndarray      # bool [T, k]: NaN/Inf/untouched in the cell's row
    zero: np.ndarray     # bool [T, k]: row exactly zero while the reference is not
    dev_num: np.ndarray  # float64 [T, k]: ||O - twin||^2 (twin = the expected numerics' output)
    dev_den: np.ndarray  # float64 [T, k]: ||twin||^2
    ids: np.ndarray      # int64 [T, k]: the expert of each cell

    @property
    def rel(self) -> np.ndarray:
        """Relative error vs the exact reference, ||O - R|| / ||R|| (what NVFP4 costs)."""
        return cell_rel(self.num, self.den)

    @property
    def dev(self) -> np.ndarray:
        """Deviation from the expected numerics: ||O - twin|| / max(||twin||, 0.25 median_e ||twin||)."""
        return cell_rel(self.dev_num, self.dev_den, self.ids, floor=DEV_FLOOR)


#: deviation floor: a fraction of the median cell norm of the same expert
DEV_FLOOR = 0.25


def cell_rel(num: np.ndarray, den: np.ndarray, ids: np.ndarray | None = None, floor: float = 0.0) -> np.ndarray:
    """sqrt(num / max(den, floor^2 * median_e(den))) per cell (median over the cells of the same expert).

    The floor keeps near-zero expert outputs (cancellation) from dominating; inf where num is inf.
    """
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    d = den.copy()
    if floor > 0 and ids is not None:
        for e in np.unique(ids):
            m = ids == e
            pos = den[m][den[m] > 0]
            if pos.size:
                d[m] = np.maximum(den[m], floor ** 2 * float(np.median(pos)))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(num / d)
    zero = d == 0
    r[zero] = np.where(num[zero] == 0, 0.0, np.inf)
    return r


def _masks(out: torch.Tensor):
    sentinel = out == SENTINEL
    nan = torch.isnan(out)
    inf = torch.isinf(out)
    return sentinel, nan, inf


def output_diff(out: torch.Tensor, ref: torch.Tensor) -> OutputDiff:
    sentinel, nan, inf = _masks(out)
    bad = sentinel | nan | inf
    o = torch.where(bad, torch.zeros((), dtype=out.dtype, device=out.device), out).double()
    r = ref.double()
    d = o - r
    bad_rows = bad.any(dim=1)
    good = ~bad_rows
    row_num = (d * d).sum(dim=1)
    row_den = (r * r).sum(dim=1)
    per_token = torch.sqrt(row_num / row_den.clamp_min(1e-300))
    per_token = torch.where(row_den == 0, torch.where(row_num == 0, 0.0, torch.inf).double(), per_token)
    per_token = torch.where(bad_rows, torch.full_like(per_token, torch.inf), per_token)
    den_all = float(row_den.sum())
    fin = float(torch.sqrt(row_num[good].sum() / max(float(row_den[good].sum()), 1e-300))) if bool(good.any()) else float("inf")
    rel = float("inf") if bool(bad.any()) else float(np.sqrt(float(row_num.sum()) / max(den_all, 1e-300)))
    og, rg = o[good], r[good]
    denom = float(og.norm() * rg.norm())
    cosine = float((og * rg).sum()) / denom if denom > 0 else (1.0 if float(og.norm()) == float(rg.norm()) == 0 else 0.0)
    zero_rows = ((o == 0).all(dim=1) & ~bad_rows & (row_den > 0)).nonzero().flatten().tolist()
    return OutputDiff(rel_fro=rel, rel_fro_finite=fin, cosine=cosine,
                      max_abs=float(d[~bad].abs().max()) if bool((~bad).any()) else float("inf"),
                      nan=int(nan.sum()), inf=int(inf.sum()), untouched=int(sentinel.sum()),
                      zero_rows=zero_rows, per_token=per_token.cpu().numpy())


def cell_diff(slot_outs: list[torch.Tensor], ref_slots: torch.Tensor, topk_ids: torch.Tensor,
              twin_slots: torch.Tensor | None = None) -> CellDiff:
    """``slot_outs[j]``: the backend's [T, H] output of probe j; ``ref_slots``/``twin_slots``: [T, k, H]."""
    nums, dens, bads, zeros, dnums, ddens = [], [], [], [], [], []
    for j, out in enumerate(slot_outs):
        sentinel, nan, inf = _masks(out)
        badm = sentinel | nan | inf
        bad = badm.any(dim=1)
        o = torch.where(badm, torch.zeros((), dtype=out.dtype, device=out.device), out).double()
        r = ref_slots[:, j].double()
        tw = r if twin_slots is None else twin_slots[:, j].double()
        num = ((o - r) ** 2).sum(dim=1)
        den = (r * r).sum(dim=1)
        dnum = ((o - tw) ** 2).sum(dim=1)
        inf_row = torch.full_like(num, torch.inf)
        nums.append(torch.where(bad, inf_row, num))
        dnums.append(torch.where(bad, inf_row, dnum))
        dens.append(den)
        ddens.append((tw * tw).sum(dim=1))
        bads.append(bad)
        zeros.append((o == 0).all(dim=1) & ~bad & (den > 0))
    st = lambda xs: torch.stack(xs, dim=1).cpu().numpy()  # noqa: E731
    return CellDiff(num=st(nums), den=st(dens), bad=st(bads), zero=st(zeros), dev_num=st(dnums), dev_den=st(ddens),
                    ids=topk_ids.cpu().numpy())


def expert_errors(cells: CellDiff, topk_ids: torch.Tensor, num_experts: int) -> np.ndarray:
    """Per-expert relative error sqrt(sum num / sum den) over its cells; NaN for unrouted experts."""
    ids = topk_ids.cpu().numpy().reshape(-1)
    num = np.bincount(ids, weights=np.where(np.isinf(cells.num), 0.0, cells.num).reshape(-1), minlength=num_experts)
    den = np.bincount(ids, weights=cells.den.reshape(-1), minlength=num_experts)
    cnt = np.bincount(ids, minlength=num_experts)
    badc = np.bincount(ids, weights=(np.isinf(cells.num) | cells.bad).reshape(-1).astype(float), minlength=num_experts)
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.sqrt(num / den)
    err[(den == 0) & (num == 0)] = 0.0
    err[(den == 0) & (num > 0)] = np.inf
    err[badc > 0] = np.inf
    err[cnt == 0] = np.nan
    return err
