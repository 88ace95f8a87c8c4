#!/usr/bin/env bash
# Consecutive CI runs, each on a fresh clone (issue 32, "a deterministic CI"): clone COMMIT of REPO into a new
# folder, run exactly what .ci/run runs (`make test`: a new .venv, lint, pytest and nbval), record one JSON line
# per run, delete the clone, repeat. Stops at the first failure unless KEEP_GOING=1.
#   scripts/ci_repeat.sh REPO COMMIT N OUT.jsonl [WORKDIR]
set -uo pipefail
if [ $# -lt 4 ] || ! [[ $3 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/ci_repeat.sh REPO COMMIT N OUT.jsonl [WORKDIR]  (N: a positive number of runs)" >&2; exit 2
fi
repo=$1; commit=$2; n=$3; out=$4; work=${5:-$(mktemp -d)}
mkdir -p "$work"
for i in $(seq 1 "$n"); do
  dir="$work/run_$i"
  rm -rf "$dir"
  git clone --quiet "$repo" "$dir" && git -C "$dir" checkout --quiet "$commit" || { echo "clone $i failed"; exit 2; }
  start=$(date -u +%s)
  (cd "$dir" && .ci/run) > "$work/log_$i.txt" 2>&1
  rc=$?
  end=$(date -u +%s)
  summary=$(grep -E "^=+ .*(passed|failed|error).* in " "$work/log_$i.txt" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
  printf '{"run": %d, "commit": "%s", "rc": %d, "seconds": %d, "started_utc": "%s", "pytest": "%s", "host_cores": %d}\n' \
    "$i" "$(git -C "$dir" rev-parse HEAD)" "$rc" "$((end - start))" "$(date -u -d @"$start" +%FT%TZ)" "$summary" \
    "$(nproc)" >> "$out"
  tail -1 "$out"
  rm -rf "$dir"
  if [ "$rc" -ne 0 ] && [ "${KEEP_GOING:-0}" != 1 ]; then
    echo "run $i failed (log $work/log_$i.txt)"; exit 1
  fi
done
