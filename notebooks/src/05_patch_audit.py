# %% [markdown]
# # 05 · Which SM120 patches matter? An audit of the seed report's edits
#
# The seed report (flashinfer-ai/flashinfer#2723) hand-edited 10+ files in FlashInfer 0.6.5 and
# three in vLLM 0.17.0 to get NVFP4 MoE running on an RTX PRO 6000 (SM120). People copy such
# patches around. Here every one of those edits is a declarative spec
# (`sm120lab/patches/specs/*.yaml`: file, exact anchor, replacement, classification, evidence)
# and `sm120lab.patches` checks it against the **real wheel files**, downloaded from PyPI:
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
#
# Runs on a CPU; needs PyPI once (wheels are cached in `~/.cache/sm120lab/wheels`).

# %%
import textwrap

from rich.console import Console

from sm120lab import doctor, results
from sm120lab.patches import audit
from sm120lab.patches.site import locate
from sm120lab.patches.spec import load_specs
from sm120lab.patches.wheels import fetch_for_audit

# %% tags=["parameters"]
# (distribution, version) pairs to audit from PyPI. 0.7.4 is the newest 0.7.x as of Dec 2026.
# vLLM 0.17.0 is a 433 MB download (cached after the first run): add ("vllm", "0.17.0") to audit it.
wheels = [("flashinfer-python", "0.6.5"), ("flashinfer-python", "0.7.4")]
show_evidence_for = ["fi-trtllm-launcher-major-ge-10", "fi-cutedsl-mbar-sm120a-1", "fi-compilation-context-arch-suffix"]

# %% [markdown]
# ## 1. Fetch the wheels
# Only the files the specs patch or quote are extracted (a download failure is reported in one line).

# %%
# NBVAL_IGNORE_OUTPUT
trees = {}
for dist, version in wheels:
    try:
        root = fetch_for_audit(dist, version)
        trees[(dist, version)] = locate(dist, "flashinfer" if dist == "flashinfer-python" else dist, root)
        print(f"{dist} {version}: {root}")
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        print(f"{dist} {version}: not audited ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")

# %%
audits = {}
for key, tree in trees.items():
    specs = load_specs(tree.package, tree.version)
    audits[key] = (specs, audit.rows(tree, specs))


def own(rows):
    """Rows from this kit's spec files (the stage-count spec is shown separately below)."""
    return [r for r in rows if r["source"].startswith(("flashinfer_0_6", "vllm_"))]


# %% [markdown]
# ## 2. The audit table
# One row per seed edit (the 18 CuTeDSL `admissible_archs` locations are one row each).

# %%
# NBVAL_CHECK_OUTPUT
for (dist, version), (specs, rows) in audits.items():
    print(f"== {dist} {version}")
    for r in own(rows):
        cls = r["classification"] + (f" {r['upstreamed_in']}" if r["upstreamed_in"] else "")
        print(f"  {r['id']:<38} {cls:<17} {r['status']:<16} {r['advice']}")
    print("  totals:", ", ".join(f"{k} {v}" for k, v in sorted(audit.summary(own(rows)).items())))

# %% [markdown]
# ### The versions installed here (if any)

# %%
# NBVAL_IGNORE_OUTPUT
for dist, import_name in (("flashinfer-python", "flashinfer"), ("vllm", "vllm")):
    try:
        tree = locate(dist, import_name)
        rows = audit.rows(tree, load_specs(dist, tree.version))
    except Exception as exc:  # noqa: BLE001 - not installed / no spec: one line
        print(f"{dist}: {str(exc).splitlines()[0][:200]}")
        continue
    print(f"== {dist} {tree.version} installed at {tree.root}")
    for r in rows:
        print(f"  {r['id']:<38} {r['classification']:<11} {r['status']:<16} {r['advice']}")

# %% [markdown]
# What this says, for FlashInfer **0.6.5**: none of the seed's edits is needed. The 18 CuTeDSL
# edits land in a stale copy of the CuTe DSL that nothing imports (`import cutlass` resolves to
# the `nvidia-cutlass-dsl` package), and tcgen05 does not exist on SM120 anyway; the
# `supported_major_versions` edits for the SM100/SM103 modules are never reached on SM120, which
# already has its own module; the three trtllm-gen edits are **harmful**: they let SM120 into
# a runner whose cubins are SM100-only. `compilation_context.py` already gives SM120 `12.0a`;
# only an explicit `FLASHINFER_CUDA_ARCH_LIST=12.0` is taken literally, fixed by a setting.
# From **0.6.7** on, FlashInfer does the suffix and the launcher gate itself (bisected: 0.6.6
# has neither, 0.6.7 both), and 0.7.4 no longer ships the stale CuTeDSL copy.
#
# ## 3. Settings that replace a patch

# %%
# NBVAL_CHECK_OUTPUT
for (dist, version), (specs, rows) in audits.items():
    for s in audit.settings_rows(specs):
        env = " ".join(f"{k}={v}" for k, v in s["env"].items())
        print(f"{dist} {version}: {env}  replaces {s['replaces'] or '-'}")

# %% [markdown]
# ## 4. Evidence, quoted from the wheel files (`[version] path:line: text`)
# The unit test `test_evidence_lines_quote_the_real_files` checks every such line against the wheel.

# %%
for (dist, version), (specs, rows) in audits.items():
    for r in rows:
        if r["id"] in show_evidence_for:
            print(f"-- {version} {r['id']} ({r['classification']}): {r['purpose']}")
            print(textwrap.indent(r["evidence"], "   "))

# %% [markdown]
# ## 5. The patch that matters: SM120 grouped-GEMM stage count
# Written separately (`specs/flashinfer_sm120_stage_count.yaml`, with the shared-memory proof in
# `sm120lab.cutlass_smem`). Shown here when that spec is present for the audited version.

# %%
# NBVAL_IGNORE_OUTPUT
found = False
for (dist, version), (specs, rows) in audits.items():
    for r in rows:
        if r not in own(rows):
            found = True
            print(f"{version}: {r['id']:<30} {r['classification']:<10} {r['status']:<16} {r['advice']}")
            print(textwrap.indent(r["purpose"], "   "))
if not found:
    print("no stage-count spec in this checkout (sm120lab/patches/specs/flashinfer_sm120_stage_count.yaml)")

# %% [markdown]
# ## 6. `sm120lab doctor` on this machine
# The first table is this machine; the second judges the same software stack for an SM120 GPU
# (reasoning from the wheels and compile probes: unverified on SM120 hardware).

# %%
# NBVAL_IGNORE_OUTPUT
report = doctor.run()
doctor.render(report, Console(force_jupyter=False, no_color=True, width=130, highlight=False))

# %%
results.record("05_patch_audit", {
    "audits": {f"{d}=={v}": own(rows) for (d, v), (specs, rows) in audits.items()},
    "doctor": {"verdicts": report["verdicts"], "verdicts_if_sm120": report["verdicts_if_sm120"],
               "facts": report["facts"]},
})
print("recorded")
