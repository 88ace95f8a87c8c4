#!/usr/bin/env bash
# One device call on a GPU machine with no registry access: the doctor (measured verdicts) and a
# full `sm120lab run` of every notebook, archived with its figures and report.html.
# Carried (ignored) folders: .whl_nb/ (the notebook toolchain as Python 3.12 wheels, from
# constraints.txt; `pip download --only-binary=:all: --python-version 3.12 --no-deps`) and
# .wheelhouse/ (FlashInfer wheels for notebook 05's audit, read through SM120LAB_WHEELHOUSE).
# vLLM's Marlin (notebooks 03, 04 and 07 read it through the `vllm-marlin` adapter): when VPARTS names a folder
# holding the parts of `sm120lab upstream vllm-cache 0.26.0 --pack DIR` (carried one per call beforehand,
# scripts/h200_marlin.py says how), the cache is rebuilt from them, checked, and used. DOCTOR=0 skips the doctor.
# Outputs go to $OUT (the device tool's return folder), or to ./h200_out when it is unset.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
SITE=$PWD/.site
python3 scripts/install_wheelhouse.py .whl_nb "$SITE" || exit 3
export PYTHONPATH=$SITE:$PWD JUPYTER_PATH=$SITE/share/jupyter SM120LAB_ROOT=$PWD SM120LAB_WHEELHOUSE=$PWD/.wheelhouse
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ -n "${VPARTS:-}" ]; then
  echo "== vllm cache from $VPARTS"
  python3 -m sm120lab upstream vllm-cache 0.26.0 --from-parts "$VPARTS"/part* --dest "$HOME/vllm-cache" \
    && export SM120LAB_VLLM_CACHE=$HOME/vllm-cache
fi
if [ "${DOCTOR:-1}" != 0 ]; then
  echo "== doctor"; timeout 120 python3 -m sm120lab doctor --json "$OUT/doctor_h200.json" > "$OUT/doctor_h200.txt" 2>&1
  echo "doctor exit $?"; tail -25 "$OUT/doctor_h200.txt"
fi
echo "== run"; rm -rf runs
timeout "${RUN_TIMEOUT:-420}" python3 -m sm120lab run --no-progress 2>&1 | tail -30
RUN=$(ls -d runs/*/ | head -1)
python3 -m sm120lab archive "$RUN" --dest "$PWD/.archive" && tar czf "$OUT/run_h200.tgz" -C "$PWD/.archive" .
ls -la "$OUT"
