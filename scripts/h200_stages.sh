#!/usr/bin/env bash
# Back-to-back device calls on the lent H200 (no registry): each call runs one STAGE and writes under $OUT.
#   stage gpu    carry .whl_min (pytest, hypothesis, pydantic, ... as cp312 wheels) and .vllm-parts/part00:
#                the GPU kernel tests (tests/gpu/test_moe_kernels_gpu.py), then compute-sanitizer memcheck over
#                the expert-id tests (out-of-range ids, masks and counts)
#   stage san    carry .vllm-parts/part01: compute-sanitizer memcheck, racecheck and initcheck over
#                scripts/sanitize_moe.py (every path at odd shapes)
#   stage bench  carry .vllm-parts/part02: vLLM 0.26.0's wheel cache rebuilt from the three parts, then
#                `sm120lab bench moe --tune` for MODELS (default qwen3.5-397b-a17b) with Marlin in the same process
#   stage deep   ncu --set full (source counters, per-instruction stall samples) over ours' kernels at T = 1 and 16,
#                qwen3.5-397b-a17b and gpt-oss-120b: the report, its details page and its SASS source page
#   stage ping   scripts/ping_probe.py (the fragment kernels' PING tiles against the tiles they derive from, kernels
#                alone and the layer, T = 1-1024, four presets)
#   stage pingtest  the GPU kernel tests of the PING tiles, then memcheck over their expert-id tests
#   stage share  scripts/share_b_probe.py (the two-tile fragment kernels with SHARE_B, one activation load per lane for
#                both tiles, against the same tile without it: the layer at T = 256-4096 with vLLM's Marlin where the
#                three parts came in earlier calls, then kernels alone, T = 1-4096, four presets)
#   stage tune   scripts/h200_plan_run.py --tune (work folder /root/plan_run, kept while the machine is warm): each of
#                TUNE_PRESETS tuned into this GPU's own table (<gpu>.json) and timed from it with Marlin, torch bf16 /
#                FP8 grouped and the peer; then TUNE_SHAPES (default the two of no preset; empty: none) planned from it
#   stage files  carry .vllm-parts/part02: the cache rebuilt as in bench, then scripts/h200_plan_run.py: every preset
#                and two shapes of no preset, planned from this GPU's table data/tiles/<gpu>.json, with Marlin, torch bf16 / FP8
#                grouped and the peer (a skip row with its reason where triton_kernels does not import)
#   stage widetest  the GPU kernel tests of the fourteenth round's tiles (f4w2oc2b, f2w2oc4b, f4w2oc4b), then memcheck over
#                their expert-id tests
#   stage widencu   ncu (speed of light, memory, occupancy, warp state) over scripts/wide_b_probe.py --once at WIDE_NCU_T
#                (default 1024), qwen3.5-397b-a17b and gpt-oss-120b: the details page as CSV
#   stage wide   carry the last part: the cache rebuilt (once per warm machine), then scripts/wide_b_probe.py (every
#                preset and two shapes of no preset, T = 256, 1024, 4096: the table's plan, f2w2oc2b, the new tiles'
#                pairings, vLLM's Marlin; WIDE_PRESETS, WIDE_SHAPES (empty: none), WIDE_TOKENS and WIDE_PAIRS narrow it)
# Parts: since 2026-12-07 the tracked tree (29 MB) leaves room for one 20 MiB part per call beside .whl_min, so the
# cache travels as 5 parts (`sm120lab upstream vllm-cache 0.26.0 --from-parts OLD... --pack .vllm-parts --part-mb 20`),
# one per warm call; the stages' part numbers above are those of the earlier 3 x 36 MiB packing.
# Wheels and parts live outside the repository (/root/site, /root/vparts) so later calls on the warm machine see them.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
SITE=/root/site; VP=/root/vparts; mkdir -p "$SITE" "$VP"
export PYTHONPATH=$SITE:$PWD SM120LAB_ROOT=$PWD
for p in .vllm-parts/part*; do [ -d "$p" ] && cp -r "$p" "$VP/"; done
ls "$VP"
stage=$1; shift
env_line() { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"; git log -1 --format=%H 2>/dev/null || true; }
# vLLM 0.26.0's wheel cache from the carried parts, built once per warm machine, then used where it exists
vcache() {
  if [ ! -d /root/vllm-cache ]; then
    python3 -m sm120lab upstream vllm-cache 0.26.0 --from-parts "$VP"/part* --dest /root/vllm-cache > "$OUT/vcache.txt" 2>&1
    echo "vllm cache exit $?"; tail -2 "$OUT/vcache.txt"
  fi
  [ -d /root/vllm-cache ] && export SM120LAB_VLLM_CACHE=/root/vllm-cache
}
case $stage in
gpu)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  timeout 300 python3 -m pytest -p no:cacheprovider -m gpu -rA tests/gpu/test_moe_kernels_gpu.py > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests exit $?"; tail -3 "$OUT/gpu_tests.txt"
  timeout 200 compute-sanitizer --tool memcheck --target-processes all python3 -m pytest -p no:cacheprovider -m gpu -q \
    tests/gpu/test_moe_kernels_gpu.py -k "out_of_range or masks_and_counts" > "$OUT/memcheck_ids.txt" 2>&1
  echo "memcheck ids exit $?"; tail -4 "$OUT/memcheck_ids.txt"
  ;;
san)
  env_line | tee "$OUT/env.txt"
  for tool in memcheck racecheck initcheck; do
    timeout 170 compute-sanitizer --tool $tool python3 scripts/sanitize_moe.py > "$OUT/sanitizer_$tool.txt" 2>&1
    echo "$tool exit $?"; tail -2 "$OUT/sanitizer_$tool.txt"
  done
  ;;
bench)
  env_line | tee "$OUT/env.txt"
  python3 -m sm120lab upstream vllm-cache 0.26.0 --from-parts "$VP"/part* --dest /root/vllm-cache > "$OUT/vcache.txt" 2>&1
  echo "vllm cache exit $?"; tail -2 "$OUT/vcache.txt"
  export SM120LAB_VLLM_CACHE=/root/vllm-cache
  [ -f "$OUT/tiles_h200.json" ] || cp data/tiles/h200.json "$OUT/tiles_h200.json"
  for m in ${MODELS:-qwen3.5-397b-a17b}; do
    timeout ${BENCH_TIMEOUT:-270} python3 -m sm120lab bench moe --model $m --tokens ${TUNE_T:-256,1024} --tune \
      --tiles "$OUT/tiles_h200.json" --contenders triton-w4a16,vllm-marlin --no-eager \
      --out "$OUT/bench_tune_$m.json" > "$OUT/log_tune_$m.txt" 2>&1
    echo "$m tune exit $?"; grep -E "^T=|speedup_vs_marlin" "$OUT/log_tune_$m.txt" | grep -v profile | tail -12
  done
  ;;
deep)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  for m in ${MODELS:-qwen3.5-397b-a17b gpt-oss-120b}; do
    timeout ${DEEP_TIMEOUT:-240} ncu --profile-from-start off --clock-control none --set full --import-source no \
      -k regex:moe_w4a16 -f -o "$OUT/deep_$m" python3 scripts/ncu_moe.py --model $m --tokens ${DEEP_T:-1,16} \
      --contenders triton-w4a16 --windows "$OUT/deep_windows_$m.json" > "$OUT/deep_log_$m.txt" 2>&1
    echo "$m ncu exit $?"; tail -2 "$OUT/deep_log_$m.txt"
    ncu -i "$OUT/deep_$m.ncu-rep" --page details --csv > "$OUT/deep_details_$m.csv" 2>&1
    ncu -i "$OUT/deep_$m.ncu-rep" --page source --csv --print-source sass > "$OUT/deep_source_$m.csv" 2>&1
    xz -T0 -6 "$OUT/deep_details_$m.csv" "$OUT/deep_source_$m.csv"
  done
  ;;
ping)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  timeout ${PING_TIMEOUT:-540} python3 scripts/ping_probe.py "$OUT/ping_probe.jsonl" ${PING_PRESETS:+--presets $PING_PRESETS} > "$OUT/ping_log.txt" 2>&1
  echo "ping probe exit $?"; grep '"layer"' "$OUT/ping_probe.jsonl" | cut -c1-260
  ;;
pingtest)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  timeout 290 python3 -m pytest -p no:cacheprovider -m gpu -q -rA tests/gpu/test_moe_kernels_gpu.py -k "d2 or d4" \
    > "$OUT/gpu_tests_ping.txt" 2>&1
  echo "gpu tests (PING tiles) exit $?"; tail -3 "$OUT/gpu_tests_ping.txt"
  timeout 140 compute-sanitizer --tool memcheck --target-processes all python3 -m pytest -p no:cacheprovider -m gpu -q \
    tests/gpu/test_moe_kernels_gpu.py -k "(d2 or d4) and out_of_range" > "$OUT/memcheck_ping.txt" 2>&1
  echo "memcheck (PING tiles) exit $?"; tail -4 "$OUT/memcheck_ping.txt"
  ;;
share)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  [ -d "$VP/part02" ] && vcache
  timeout ${SHARE_TIMEOUT:-500} python3 scripts/share_b_probe.py "$OUT/share_b_probe.jsonl" \
    ${SHARE_PRESETS:+--presets $SHARE_PRESETS} ${SHARE_TOKENS:+--tokens $SHARE_TOKENS} \
    ${SHARE_LAYER_TOKENS:+--layer-tokens $SHARE_LAYER_TOKENS} > "$OUT/share_log.txt" 2>&1
  echo "share probe exit $?"; tail -3 "$OUT/share_log.txt" | cut -c1-300
  ;;
widetest)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  timeout 290 python3 -m pytest -p no:cacheprovider -m gpu -q -rA tests/gpu/test_moe_kernels_gpu.py \
    -k "f4w2oc2b or oc4b" > "$OUT/gpu_tests_wide.txt" 2>&1
  echo "gpu tests (wide SHARE_B tiles) exit $?"; tail -3 "$OUT/gpu_tests_wide.txt"
  timeout 150 compute-sanitizer --tool memcheck --target-processes all python3 -m pytest -p no:cacheprovider -m gpu -q \
    tests/gpu/test_moe_kernels_gpu.py -k "(f4w2oc2b or oc4b) and (out_of_range or masks_and_counts)" \
    > "$OUT/memcheck_wide.txt" 2>&1
  echo "memcheck (wide SHARE_B tiles) exit $?"; tail -4 "$OUT/memcheck_wide.txt"
  ;;
widencu)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  for m in ${MODELS:-qwen3.5-397b-a17b gpt-oss-120b}; do
    timeout ${NCU_TIMEOUT:-200} ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section Occupancy --section LaunchStats --section WarpStateStats -k regex:moe_w4a16_frag_kernel -f \
      -o "$OUT/wide_$m" python3 scripts/wide_b_probe.py "$OUT/wide_once_$m.jsonl" --presets $m --shapes "" \
      --tokens ${WIDE_NCU_T:-1024} --once > "$OUT/wide_ncu_log_$m.txt" 2>&1
    echo "$m ncu exit $?"; tail -2 "$OUT/wide_ncu_log_$m.txt"
    ncu -i "$OUT/wide_$m.ncu-rep" --page details --csv > "$OUT/wide_details_$m.csv" 2>&1
    xz -T0 -6 "$OUT/wide_details_$m.csv"; rm -f "$OUT/wide_$m.ncu-rep"
  done
  ;;
wide)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  vcache
  timeout ${WIDE_TIMEOUT:-540} python3 scripts/wide_b_probe.py "$OUT/wide_b_probe.jsonl" \
    ${WIDE_PRESETS+--presets "$WIDE_PRESETS"} ${WIDE_SHAPES+--shapes "$WIDE_SHAPES"} \
    ${WIDE_TOKENS:+--tokens $WIDE_TOKENS} ${WIDE_PAIRS:+--pairs $WIDE_PAIRS} > "$OUT/wide_log.txt" 2>&1
  echo "wide probe exit $?"; grep -c '"layer"' "$OUT/wide_b_probe.jsonl"
  ;;
tune)
  [ -d .whl_min ] && python3 scripts/install_wheelhouse.py .whl_min "$SITE" > "$OUT/install.txt" 2>&1
  env_line | tee "$OUT/env.txt"
  vcache
  shapes=(); for s in ${TUNE_SHAPES-7168,2048,256,8 5120,1536,160,8}; do shapes+=(--shape "$s"); done
  timeout ${TUNE_TIMEOUT:-570} python3 scripts/h200_plan_run.py --out-dir "$OUT" --work /root/plan_run --tune \
    --budget-s ${BUDGET:-470} --tag ${TAG:-tune} --presets "${TUNE_PRESETS:-qwen3.5-397b-a17b,gpt-oss-120b,qwen3-235b-a22b,qwen3-next-80b-a3b}" \
    --contenders triton-w4a16,vllm-marlin,torch-bf16-grouped,torch-fp8-grouped,oai-matmul-ogs-mxfp4 "${shapes[@]}" \
    > "$OUT/tune_stdout.txt" 2>&1
  echo "tune run exit $?"; grep -E "tuned:|checks_ok|CRASHED|skipped" "$OUT/tune_stdout.txt" | cut -c1-300 | tail -40
  cp /root/plan_run/*.json "$OUT/" 2>/dev/null
  ;;
files)
  env_line | tee "$OUT/env.txt"
  vcache
  timeout ${FILES_TIMEOUT:-560} python3 scripts/h200_plan_run.py --out-dir "$OUT" --budget-s ${BUDGET:-480} --tag ${TAG:-files} \
    --contenders triton-w4a16,vllm-marlin,torch-bf16-grouped,torch-fp8-grouped,oai-matmul-ogs-mxfp4 \
    --shape 7168,2048,256,8 --shape 5120,1536,160,8 > "$OUT/files_stdout.txt" 2>&1
  echo "plan run exit $?"; grep -E "checks_ok|CRASHED|skipped" "$OUT/files_stdout.txt" | cut -c1-400 | tail -12
  ;;
esac
ls -la "$OUT"
