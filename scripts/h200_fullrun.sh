#!/usr/bin/env bash
# One device call on the lent H200: GPU unit tests, doctor, and a full `sm120lab run` of every
# notebook, archived (trimmed) for data/runs/. Needs the papermill/nbconvert/ipykernel wheels for
# Python 3.12 in .whl_nb/ (carried; see README "Recorded runs").
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl_nb/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD JUPYTER_PATH=/tmp/site/share/jupyter SM120LAB_ROOT=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== gpu tests"; timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tee $OUT/gpu_tests.log | tail -15
echo "== doctor"; timeout 60 python3 -m sm120lab doctor --json $OUT/doctor_h200.json > $OUT/doctor_h200.txt 2>&1; tail -5 $OUT/doctor_h200.txt
echo "== run"; rm -rf runs
timeout 330 python3 -m sm120lab run --no-progress 2>&1 | tail -25
RUN=$(ls -d runs/*/ | head -1)
python3 -m sm120lab archive $RUN --dest /tmp/archive && tar czf $OUT/run_h200.tgz -C /tmp/archive .
ls -la $OUT
