# %% [markdown]
# # 05 · Which SM120 patches matter? An audit of the seed report's edits
#
# The seed report (flashinfer-ai/flashinfer#2723) hand-edited 10+ files in FlashInfer 0.6.5 and
# three in vLLM 0.17.0 to get NVFP4 MoE running on an RTX PRO 6000 (SM120). People copy such
# patches around. Here every one of those edits is a declarative spec
# (`sm120lab/patches/specs/*.yaml`: file, exact anchor, replacement, classification, evidence)
# and `sm120lab.patches` checks it against the **real files**: the FlashInfer / vLLM installed in
# this interpreter when there is one, else the wheels in a local wheelhouse
# (`$SM120LAB_WHEELHOUSE`), else FlashInfer 0.6.5 and 0.7.4 downloaded from PyPI.
#
# | classification | meaning |
# |---|---|
# | `needed` | the fix matters on SM120 for this version |
# | `no-op` | changes nothing on SM120 (a file nothing imports, or a module SM120 never selects) |
# | `harmful` | unlocks a path that has no SM120 kernels (the seed's "TRT-LLM: Crash") |
# | `upstreamed` | the version already does it |
#
# The state column is read from the files: `applicable` (anchor found exactly once), `applied`,
# `anchor-missing`, `anchor-ambiguous`, `file-missing`, `documented-only` (a source-tree edit the
# wheel does not contain). `sm120lab patch status --site DIR` prints the same table;
# `sm120lab patch apply|revert` applies the `needed` ones with a backup and a SHA-256 manifest.

# %%
import io
import re
import textwrap

import pandas as pd
from rich.console import Console

from sm120lab import doctor, recommend
from sm120lab.patches import audit, audit_available
from sm120lab.runs import answer, results
from sm120lab.runs.answer import Answer, Status

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 90)

# %% tags=["parameters"]
packages = ["flashinfer-python", "vllm"]
# versions downloaded from PyPI when a package is neither installed nor in the wheelhouse
# (vLLM 0.17.0 is a 433 MB download: add "vllm": ["0.17.0"] to audit it)
fallback = {"flashinfer-python": ["0.6.5", "0.7.4"]}
wheelhouse = None      # a folder of .whl files; $SM120LAB_WHEELHOUSE is searched too
download = True
show_evidence_for = ["fi-trtllm-launcher-major-ge-10", "fi-cutedsl-mbar-sm120a-1", "fi-compilation-context-arch-suffix"]
guide_gpu = "rtx-pro-6000"   # the decision guide's GPU: rtx-pro-6000 | rtx-5090 | dgx-spark

# %%
found = audit_available(packages, fallback=fallback, wheelhouse=wheelhouse, download=download)
STAGE = "flashinfer_sm120_stage_count"


def seed_edits(rows):
    """Rows of the seed report's own edits (the stage-count patch is this project's, shown apart)."""
    return [r for r in rows if not r["source"].startswith(STAGE)]


report = doctor.run()
box = []
for a in found.audits:
    counts = audit.summary(seed_edits(a.rows))
    kinds = {k: v for k, v in counts.items() if not k.startswith("status:")}
    needed = kinds.get("needed", 0)
    box.append(Answer(f"the seed's edits that {a.package} {a.version} needs ({a.origin.value})",
                      f"{needed} of {sum(kinds.values())}", Status.warn if needed else Status.ok,
                      ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))))
    stage = [r for r in a.rows if r["source"].startswith(STAGE)]
    if stage:
        applied = stage[0]["status"] == "applied"
        box.append(Answer(f"stage-count patch (SM120 shared memory) for {a.package} {a.version}",
                          f"{stage[0]['classification']}, {'applied' if applied else 'not applied'}",
                          Status.ok if applied else Status.bad,
                          f"audit state {stage[0]['status']}; `sm120lab patch apply` (notebook 02 shows why)"))
for key, why in found.not_audited.items():
    box.append(Answer(f"{key} audited", "not run", Status.not_run, why))
usable = [r["backend"] for r in report["verdicts"] if r["verdict"] == "yes"
          and r["backend"] not in ("reference", "emulated-w4a4")]        # the harness's own references
box.append(Answer("NVFP4 MoE backends usable on this machine (doctor)", ", ".join(usable) or "none",
                  Status.info, f"{report['facts'].get('gpu_name') or 'no GPU'}; the harness's references "
                  "(reference, emulated-w4a4) left out; section 6"))
answer.show(box)
_ = answer.record(box, "05_patch_audit")

# %% [markdown]
# ## 1. What was audited
# One line per audited tree and per package that could not be audited (with its reason).

# %%
# NBVAL_IGNORE_OUTPUT
for line in found.lines():
    print(line)

# %% [markdown]
# ## 2. The audit table
# One row per seed edit; edits repeated at several locations of one file (the CuTeDSL
# `admissible_archs` lists) are one row with their count (`x4`). `sm120lab patch status` lists
# every location.

# %%
# NBVAL_IGNORE_OUTPUT
for a in found.audits:
    print(f"== {a.package} {a.version} ({a.origin.value})")
    groups = {}
    for r in seed_edits(a.rows):
        cls = r["classification"] + (f" {r['upstreamed_in']}" if r["upstreamed_in"] else "")
        groups.setdefault((re.sub(r"-\d+$", "", r["id"]), cls, r["status"], r["advice"]), []).append(r["id"])
    for (stem, cls, status, advice), ids in groups.items():
        print(f"  {stem + (f' x{len(ids)}' if len(ids) > 1 else ''):<38} {cls:<17} {status:<16} {advice}")
    print("  totals:", ", ".join(f"{k} {v}" for k, v in sorted(audit.summary(seed_edits(a.rows)).items())))

# %% [markdown]
# Why (from the specs' evidence, quoted from the wheel files in section 4): in FlashInfer
# **0.6.5** the 18 CuTeDSL edits land in a stale copy of the CuTe DSL that nothing imports
# (`import cutlass` resolves to the `nvidia-cutlass-dsl` package), and tcgen05 does not exist on
# SM120 anyway; the `supported_major_versions` edits for the SM100/SM103 modules are never reached
# on SM120, which has its own module; the three trtllm-gen edits are **harmful**: they let SM120
# into a runner whose cubins are SM100-only. `compilation_context.py` already gives SM120 `12.0a`;
# only an explicit `FLASHINFER_CUDA_ARCH_LIST=12.0` is taken literally, fixed by a setting. From
# **0.6.7** on, FlashInfer does the suffix and the launcher gate itself (0.6.6 has neither, 0.6.7
# both), and 0.7.4 no longer ships the stale CuTeDSL copy.
#
# ## 3. Settings that replace a patch

# %%
# NBVAL_IGNORE_OUTPUT
for a in found.audits:
    for s in audit.settings_rows(a.specs):
        env = " ".join(f"{k}={v}" for k, v in s["env"].items())
        print(f"{a.package} {a.version}: {env}  replaces {s['replaces'] or '-'}")

# %% [markdown]
# ## 4. Evidence, quoted from the audited files (`[version] path:line: text`)
# The unit test `test_evidence_lines_quote_the_real_files` checks every such line against the wheel.

# %%
# NBVAL_IGNORE_OUTPUT
for a in found.audits:
    for r in a.rows:
        if r["id"] in show_evidence_for:
            lines = r["evidence"].splitlines()
            print(f"-- {a.version} {r['id']} ({r['classification']}): {r['purpose']}")
            print(textwrap.indent("\n".join(lines[:8]), "   "))
            if len(lines) > 8:
                print(f"   ... {len(lines) - 8} more evidence lines in the spec")

# %% [markdown]
# ## 5. The patch that matters: SM120 grouped-GEMM stage count
# `specs/flashinfer_sm120_stage_count.yaml`, with the shared-memory proof of notebook 02
# (`sm120lab.cutlass_smem`): two NVFP4 tiles get three pipeline stages and 102,400 B of shared
# storage, over SM120's 101,376 B; the patch gives them two.

# %%
# NBVAL_IGNORE_OUTPUT
stage_rows = [(a, r) for a in found.audits for r in a.rows if r["source"].startswith(STAGE)]
for a, r in stage_rows:
    print(f"{a.version}: {r['id']:<30} {r['classification']:<10} {r['status']:<16} {r['advice']}")
    print(textwrap.indent(r["purpose"], "   "))
if not stage_rows:
    print("no audited FlashInfer version has a stage-count spec")

# %% [markdown]
# ## 6. `sm120lab doctor` on this machine
# The first table is this machine; the second judges the same software stack for an SM120 GPU
# (reasoning from the wheels and compile probes: unverified on SM120 hardware).

# %%
# NBVAL_IGNORE_OUTPUT
buffer = io.StringIO()
doctor.render(report, Console(file=buffer, force_terminal=False, force_jupyter=False, color_system=None, width=150,
                              highlight=False))
print(buffer.getvalue())

# %%
_ = results.record("05_patch_audit", {
    "audits": {a.key: {"origin": a.origin.value, "rows": seed_edits(a.rows)} for a in found.audits},
    "not_audited": found.not_audited,
    "doctor": {"verdicts": report["verdicts"], "verdicts_if_sm120": report.get("verdicts_if_sm120"),
               "facts": report["facts"]},
})


# %% [markdown]
# ## 7. What to set: the decision guide (patches and environment variables)
#
# The part of `sm120lab recommend` this notebook supports, for `guide_gpu`: each item with its
# evidence level (`sm120-run` only once a run from an SM120 machine is archived in `data/runs/`)
# and its source. `sm120lab recommend --gpu rtx-pro-6000` (or `rtx-5090`, `dgx-spark`) prints the
# whole guide.

# %%
# NBVAL_IGNORE_OUTPUT
guide_topics = ['patches', 'env']
recommend.show(recommend.section(recommend.guide(guide_gpu), guide_topics),
               title=f"decision guide for {guide_gpu}: {', '.join(guide_topics)}")
