#!/usr/bin/env bash
# Sixteenth round of issue 30 (device call): the GPU kernel tests (REG_TESTS), then the 32-slot SHARE_B tile under
# ptxas register caps (FragConfig.MAXNREG, names ...rN) or other warp counts (REG_PAIRS, names as FragConfig.name)
# against the same tile as tuned, at T = REG_T (default 1024), REG_PRESETS and REG_SHAPES, each layer's output
# bit-compared with f2w2oc2b's. Writes under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/reg_out}; mkdir -p "$OUT"
SITE=/root/site; mkdir -p "$SITE"
export PYTHONPATH=$SITE:$PWD SM120LAB_ROOT=$PWD
[ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
# REG_TESTS: a pytest -k expression over the GPU kernel tests (default the per-preset plan test; "all": every test)
k=${REG_TESTS:-every_T_bucket}; [ "$k" = all ] && k=""
timeout 300 python3 -m pytest -p no:cacheprovider -m gpu -q -rA tests/gpu/test_moe_kernels_gpu.py ${k:+-k "$k"} \
  > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests (${k:-all}) exit $?"; tail -2 "$OUT/gpu_tests.txt"
timeout ${REG_TIMEOUT:-300} python3 scripts/wide_b_probe.py "$OUT/reg_cap_probe.jsonl" \
  --presets "${REG_PRESETS-qwen3.5-397b-a17b,gpt-oss-120b}" --shapes "${REG_SHAPES-5120,1536,160,8}" \
  --tokens ${REG_T:-1024} --pairs ${REG_PAIRS:-f2w2oc2b:f2w2oc2b,f2w2oc4b:f2w2oc4b,f2w2oc4br112:f2w2oc4br112,f2w2oc4br104:f2w2oc4br104,f2w2oc4br96:f2w2oc4br96} \
  > "$OUT/reg_log.txt" 2>&1
echo "reg cap probe exit $?"
python3 - "$OUT/reg_cap_probe.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"layer"' in l]
for r in rows:
    print(r["preset"][:26], r["T"], r["plan"], round(r["us"], 1), r.get("bit_equal_to_base"))
PY
