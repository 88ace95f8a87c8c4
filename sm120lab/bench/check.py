"""Correctness of the Triton MoE op on a GPU, through the correctness harness.

:func:`check_case` takes one :class:`sm120lab.moe.MoEProblem` (its seed recorded) and runs
:func:`sm120lab.moe.harness.check` (per-slot probes off) over the reference (fp32 on a GPU, TF32
off), ``emulated-w4a4`` (:class:`~sm120lab.moe.backends.emulated_w4a4.EmulatedW4A4`) and
:func:`sm120lab.kernels.fused_moe_nvfp4` into sentinel-poisoned outputs, with its internal buffers
NaN-poisoned (``_poison=True``) and, where ``configs`` lists them, every tile config. Activation
scales are the problem's own calibration (:func:`sm120lab.moe.problem.calibrate_activation_scales`).

Returns one dict per (case, mode, configs) and never raises for a failing case (``ok`` says):

    w4a16: ok = finite and written and  rel(out, reference) < 1e-2        (bf16 intermediate/output)
    w4a4 : ok = finite and written and  rel(out, emulated) < 0.25 rel(emulated, reference)
           strict_ok = rel(out, emulated) < 5e-3

(rel = relative Frobenius error.) Each dict also carries the harness verdict and the problem seed.
"""

from __future__ import annotations

import torch

from ..moe.backends.base import Backend, Needs
from ..moe.metrics import output_diff

__all__ = ["TritonCase", "check_case", "W4A16_REL_OK", "W4A4_REL_FRACTION_OK", "W4A4_STRICT_REL"]

#: W4A16 vs the reference: bf16 rounding of the intermediate and output only
W4A16_REL_OK = 1e-2
#: W4A4 vs emulated-w4a4, as a fraction of the W4A4 quantization error itself
W4A4_REL_FRACTION_OK = 0.25
#: W4A4 vs emulated-w4a4 in absolute terms (``strict_ok``)
W4A4_STRICT_REL = 5e-3
#: a row of the W4A4 output counted as off when its error vs emulated-w4a4 exceeds this
ROW_REL_COUNTED = 1e-2


class TritonCase(Backend):
    """:func:`fused_moe_nvfp4` in one mode with given tile configs, internal buffers poisoned."""

    needs = Needs(device="cuda", packages=("triton",))
    out_dtype = torch.bfloat16

    def __init__(self, mode: str, configs=None):
        self.mode, self.configs, self.numerics = mode, configs, mode
        self.name = f"triton-{mode}" + (f"[{configs[0].name},{configs[1].name}]" if configs else "")

    def run(self, problem, out):
        from ..kernels.moe_layer import fused_moe_nvfp4

        fused_moe_nvfp4(problem.hidden, problem.topk_ids, problem.topk_weights, problem.w13, problem.w2,
                        mode=self.mode, a1_gscale=problem.a1_gscale, a2_gscale=problem.a2_gscale,
                        configs=self.configs, out=out, _poison=True)
        return {"configs": [c.name for c in self.configs] if self.configs else None}


def _case_row(label: str, case: TritonCase, result, emulated_out: torch.Tensor) -> dict:
    rep = result.reports[case.name]
    p = result.problem
    row = {"case": label, "mode": case.mode, "T": p.tokens, "seed": p.seed,
           "configs": [c.name for c in case.configs] if case.configs else None}
    if rep.diff is None:
        return {**row, "ok": False, "verdict": str(rep.verdict), "error": rep.reason}
    d = rep.diff
    finite = d.nan == 0 and d.inf == 0 and d.untouched == 0
    row.update(finite_and_written=finite, rel_vs_reference=d.rel_fro, verdict=str(rep.verdict))
    if case.mode == "w4a16":
        row["ok"] = finite and d.rel_fro < W4A16_REL_OK
        return row
    # bit-level agreement of the intermediate is seen under the interpreter; on a GPU the fp32
    # summation order differs from cuBLAS's, and a bf16 flip of the SiLU*up intermediate can flip
    # an FP4 code or a block scale of the requantized a2: a few rows then differ by a few %.
    vs_emu = output_diff(rep.output, emulated_out)
    e_a = result.envelope.e_a
    row.update({"rel_vs_emulated_w4a4": vs_emu.rel_fro, "row_rel_max": float(vs_emu.per_token.max()),
                "rows_rel_gt_1e-2": int((vs_emu.per_token > ROW_REL_COUNTED).sum()),
                "rel_emulated_vs_reference": e_a, "strict_ok": vs_emu.rel_fro < W4A4_STRICT_REL,
                "ok": finite and vs_emu.rel_fro < W4A4_REL_FRACTION_OK * e_a})
    return row


def check_case(label: str, problem, *, configs=(None,), modes=("w4a16", "w4a4")) -> list[dict]:
    """Run every mode (and, for W4A16, every entry of ``configs``) on ``problem`` through the harness."""
    from ..moe.harness import check

    cases = [TritonCase(m) for m in modes if None in configs]
    cases += [TritonCase("w4a16", cc) for cc in configs if cc is not None]
    result = check(problem, ["emulated-w4a4", *cases], probes=False, keep_output=True)
    emulated_out = result.reports["emulated-w4a4"].output
    return [_case_row(label, c, result, emulated_out) for c in cases]
