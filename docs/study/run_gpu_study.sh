#!/usr/bin/env bash
# The paper-scale DQN study on one GPU (the device machine), as run for docs/study/.
# Usage (repo root; the GPU machine has no network, so wheels of what its image lacks, gymnax & co.,
# go in .whl/ beforehand): bash docs/study/run_gpu_study.sh OUT
set -uo pipefail
OUT=${1:?output folder}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
LOG="$OUT/study.log"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -m jaxreplay info; } > "$LOG" 2>&1
start=$(date +%s)
# game  seeds  chunk (runs per compiled call)
for spec in "CartPole-v1 100 400" "Acrobot-v1 50 400" "MountainCar-v0 50 400"; do
  set -- $spec
  t0=$(date +%s)
  left=$(( ${DEADLINE_S:-540} - ($(date +%s) - start) ))
  [ "$left" -gt 30 ] || { echo "$1: skipped (no time left)" >> "$LOG"; continue; }
  timeout "$left" python3 -m jaxreplay study dqn --env "$1" --seeds "$2" --chunk-size "$3" --out "$OUT/$1" --quiet >> "$LOG" 2>&1
  echo "$1: exit $? in $(( $(date +%s) - t0 )) s (total $(( $(date +%s) - start )) s)" >> "$LOG"
  tar -czf "$OUT/$1.tar.gz" -C "$OUT" --exclude=chunks "$1" && rm -rf "$OUT/$1"
done
