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
- ``dev``: ||O - twin|| / max(||twin||, 0.1 median_e ||twin||) against the backend's expected
  numerics ("twin": emulated-w4a4 for a W4A4 backend, the reference otherwise): ~0 for a correct
  backend whatever the NVFP4 noise, O(1) for a fault. Verdicts and localization use ``dev``;
- ``dev_alt``: the same deviation against the unquantized-weight forward (what a backend with
  more precise weights than NVFP4 computes), where the harness computed it.

Main-run rows get the same deviations per token (:func:`token_diff`, floor over all tokens).
Per expert the cells aggregate as sqrt(sum ||D||^2 / sum ||R||^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sm120lab.constants import SENTINEL

__all__ = ["DEV_FLOOR", "as_alternates", "OutputDiff", "CellDiff", "TokenDiff", "cell_rel", "output_diff", "cell_diff", "token_diff",
           "expert_errors", "expert_pool", "mixing_dev"]


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
    alt_num: np.ndarray | None = None  # float64 [T, k]: ||O - alt||^2 (alt = the unquantized-weight forward)
    alt_den: np.ndarray | None = None  # float64 [T, k]: ||alt||^2

    @property
    def rel(self) -> np.ndarray:
        """Relative error vs the exact reference, ||O - R|| / ||R|| (what NVFP4 costs)."""
        return cell_rel(self.num, self.den)

    @property
    def dev(self) -> np.ndarray:
        """Deviation from the expected numerics: ||O - twin|| / max(||twin||, DEV_FLOOR median_e ||twin||)."""
        return cell_rel(self.dev_num, self.dev_den, self.ids, floor=DEV_FLOOR)

    @property
    def dev_alt(self) -> np.ndarray | None:
        """Deviation from the unquantized-weight forward (same floor), or None where it was not computed."""
        return None if self.alt_num is None else cell_rel(self.alt_num, self.alt_den, self.ids, floor=DEV_FLOOR)


#: deviation floor: a fraction of the median cell norm of the same expert (0.25 hid swapped-expert
#: cells whose output is 3-6% of their expert's median norm; 0.1 still keeps every correct and
#: correct-but-different backend far inside the limits: false-alarm sweep, notes/correctness.md)
DEV_FLOOR = 0.1


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


def _sq_rows(a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """Row-wise ||a - b||^2 (or ||a||^2) in fp64."""
    x = a if b is None else a - b
    return (x * x).sum(dim=1)


def cell_diff(slot_outs: list[torch.Tensor], ref_slots: torch.Tensor, topk_ids: torch.Tensor,
              twin_slots: torch.Tensor | None = None, alt_slots: torch.Tensor | None = None) -> CellDiff:
    """``slot_outs[j]``: the backend's [T, H] output of probe j; ``ref_slots``/``twin_slots``/``alt_slots``: [T, k, H].

    ``twin_slots``: the expected numerics (default: the reference); ``alt_slots``: the other
    acceptable expected outputs (the weight-format family: the unquantized-weight forward and the
    weights re-quantized by legitimate other quantizers, :func:`sm120lab.moe.envelope.weight_format_family`),
    one tensor or a sequence, or None; per cell the nearest of them is kept (``alt_num``/``alt_den``).
    """
    alts = as_alternates(alt_slots)
    nums, dens, bads, zeros, dnums, ddens, anums, adens = [], [], [], [], [], [], [], []
    for j, out in enumerate(slot_outs):
        sentinel, nan, inf = _masks(out)
        badm = sentinel | nan | inf
        bad = badm.any(dim=1)
        o = torch.where(badm, torch.zeros((), dtype=out.dtype, device=out.device), out).double()
        r = ref_slots[:, j].double()
        tw = r if twin_slots is None else twin_slots[:, j].double()
        inf_row = torch.full_like(bad, torch.inf, dtype=torch.float64)
        den = _sq_rows(r)
        nums.append(torch.where(bad, inf_row, _sq_rows(o, r)))
        dnums.append(torch.where(bad, inf_row, _sq_rows(o, tw)))
        dens.append(den)
        ddens.append(_sq_rows(tw))
        if alts:
            an, ad = _nearest_alternate(o, [a[:, j] for a in alts])
            anums.append(torch.where(bad, inf_row, an))
            adens.append(ad)
        bads.append(bad)
        zeros.append((o == 0).all(dim=1) & ~bad & (den > 0))
    st = lambda xs: torch.stack(xs, dim=1).cpu().numpy() if xs else None  # noqa: E731
    return CellDiff(num=st(nums), den=st(dens), bad=st(bads), zero=st(zeros), dev_num=st(dnums), dev_den=st(ddens),
                    ids=topk_ids.cpu().numpy(), alt_num=st(anums), alt_den=st(adens))


@dataclass
class TokenDiff:
    """Main-run rows against the expected outputs: deviation per token (floored like the cells)."""

    dev: np.ndarray            # float64 [T]: ||O_t - twin_t|| / max(||twin_t||, DEV_FLOOR median_t ||twin_t||)
    dev_alt: np.ndarray | None  # the same against the unquantized-weight forward, or None
    bad: np.ndarray            # bool [T]: NaN/Inf/untouched in the row
    zero: np.ndarray           # bool [T]: row exactly zero while the twin row is not


def as_alternates(alt) -> list[torch.Tensor]:
    """None, one tensor or a sequence of tensors -> a list (the acceptable other expected outputs)."""
    if alt is None:
        return []
    return [alt] if isinstance(alt, torch.Tensor) else [a for a in alt if a is not None]


def _nearest_alternate(o: torch.Tensor, alts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``o`` (float64 [T, H]): ``(||o - a||^2, ||a||^2)`` of the alternate ``a`` nearest to it in
    relative terms (the smallest ``||o - a||^2 / ||a||^2``)."""
    best_n = best_d = None
    for a in alts:
        a = a.double()
        n, d = _sq_rows(o, a), _sq_rows(a)
        if best_n is None:
            best_n, best_d = n, d
            continue
        better = n * best_d.clamp_min(1e-300) < best_n * d.clamp_min(1e-300)
        best_n, best_d = torch.where(better, n, best_n), torch.where(better, d, best_d)
    return best_n, best_d


def token_diff(out: torch.Tensor, twin: torch.Tensor, alt=None) -> TokenDiff:
    """Per-token deviation of a main-run output [T, H] from ``twin`` (and ``alt``), both [T, H].

    ``alt``: one tensor or a sequence (the weight-format family: :func:`sm120lab.moe.envelope.weight_format_family`);
    ``dev_alt`` is then the deviation from the nearest of them, per token."""
    sentinel, nan, inf = _masks(out)
    badm = sentinel | nan | inf
    bad = badm.any(dim=1)
    o = torch.where(badm, torch.zeros((), dtype=out.dtype, device=out.device), out).double()
    one_group = np.zeros(out.shape[0], dtype=np.int64)

    def dev_from(x: torch.Tensor) -> np.ndarray:
        x = x.double()
        num = torch.where(bad, torch.full_like(bad, torch.inf, dtype=torch.float64), _sq_rows(o, x))
        return cell_rel(num.cpu().numpy(), _sq_rows(x).cpu().numpy(), one_group, floor=DEV_FLOOR)

    zero = (o == 0).all(dim=1) & ~bad & (_sq_rows(twin.double()) > 0)
    alts = as_alternates(alt)
    dev_alt = None
    for a in alts:
        d = dev_from(a)
        dev_alt = d if dev_alt is None else np.fmin(dev_alt, d)
    return TokenDiff(dev=dev_from(twin), dev_alt=dev_alt, bad=bad.cpu().numpy(), zero=zero.cpu().numpy())


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


def expert_pool(num: np.ndarray, den: np.ndarray, ids: np.ndarray, num_experts: int, floor: float = DEV_FLOOR) -> np.ndarray:
    """Per expert ``sqrt(sum num / sum max(den, floor^2 median_e den))`` over its cells; NaN if unrouted.

    The pooled deviation of an expert: a systematic error shows in every cell and survives the
    pooling, a heavy-tailed rounding outlier in one cell is diluted by the others.
    """
    num, den, ids = (np.asarray(a).reshape(-1) for a in (num, den, ids))
    d = den.copy()
    for e in np.unique(ids):
        m = ids == e
        pos = den[m][den[m] > 0]
        if pos.size:
            d[m] = np.maximum(den[m], floor ** 2 * float(np.median(pos)))
    s_num = np.bincount(ids, weights=np.where(np.isfinite(num), num, np.inf), minlength=num_experts)
    s_den = np.bincount(ids, weights=d, minlength=num_experts)
    cnt = np.bincount(ids, minlength=num_experts)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.sqrt(s_num / s_den)
    out[(s_den == 0) & (s_num == 0)] = 0.0
    out[cnt == 0] = np.nan
    return out


def mixing_dev(out: torch.Tensor, slot_outs: list[torch.Tensor], topk_weights: torch.Tensor) -> np.ndarray:
    """Per token ``||O_t - sum_j w_tj P_tj|| / max(||sum_j w_tj P_tj||, DEV_FLOOR median_t ||.||)``.

    ``P_tj`` are the backend's own per-slot probe outputs: whatever its numerics, a backend that
    mixes its expert outputs with the routing weights it was given reproduces its main run from
    them to within output rounding. NaN/Inf/untouched rows give inf.
    """
    mixed = torch.zeros(out.shape, dtype=torch.float64, device=out.device)
    bad = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
    for j, p in enumerate(slot_outs):
        sentinel, nan, inf = _masks(p)
        bad |= (sentinel | nan | inf).any(dim=1)
        mixed += topk_weights[:, j].to(torch.float64).unsqueeze(1) * torch.nan_to_num(p.double())
    sentinel, nan, inf = _masks(out)
    bad |= (sentinel | nan | inf).any(dim=1)
    num = torch.where(bad, torch.full_like(bad, torch.inf, dtype=torch.float64),
                      _sq_rows(torch.nan_to_num(out.double()), mixed))
    one_group = np.zeros(out.shape[0], dtype=np.int64)
    return cell_rel(num.cpu().numpy(), _sq_rows(mixed).cpu().numpy(), one_group, floor=DEV_FLOOR)
