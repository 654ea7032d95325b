#!/usr/bin/env bash
# Paper-scale results on one GPU (the device machine), as run for docs/paper_scale/ and docs/study/:
# `jaxreplay reproduce all` (LineSearch `full`, DQN 100 seeds), then the DQN replay study of the
# games given in STUDY (100 seeds, one compiled program per stage), one after another.
# (Concurrent processes were tried on 2026-11-26 and only slowed each other: the GPU
# time-slices between processes.) Every part is resumable: rerun
# with RESUME=folder holding the paper.tar.gz and study.tar.gz of an earlier call to finish
# what a deadline cut.
# Usage (repo root; the GPU machine has no network, so wheels of what its image lacks, gymnax & co.,
# go in .whl/ beforehand):
#   DEADLINE_S=540 STUDY="Acrobot-v1 MountainCar-v0" bash docs/paper_scale/run_on_gpu.sh OUT
set -uo pipefail
OUT=${1:?output folder}
WORK=${WORK:-/tmp/work}
mkdir -p "$OUT" "$WORK"
for a in ${RESUME:-/nonexistent}/*.tar.gz; do [ -e "$a" ] && tar -xzf "$a" -C "$WORK"; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
LOG="$OUT/gpu_run.log"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -m jaxreplay info; } >> "$LOG" 2>&1
start=$(date +%s)
deadline=${DEADLINE_S:-520}
left() { echo $(( deadline - ($(date +%s) - start) )); }
part() {  # name command...: run it until the deadline (the last 60 s are kept for assembling)
  local name=$1; shift
  local t0=$(date +%s) budget=$(( $(left) - ${RESERVE:-60} ))
  [ "$budget" -gt 15 ] || { echo "$name: skipped (no time left)" >> "$LOG"; return; }
  timeout "$budget" "$@" > "$WORK/$name.log" 2>&1
  echo "$name: exit $? in $(( $(date +%s) - t0 )) s (at $(( $(date +%s) - start )) s)" >> "$LOG"
}
J="python3 -m jaxreplay"
part paper $J reproduce all --out "$WORK/paper" --quiet
for env in ${STUDY:-}; do
  part "study-$env" $J study dqn --env "$env" --seeds 100 --chunk-size 800 --out "$WORK/study/$env" --quiet
done
# Every part resumes from its sweeps: this only assembles the report and the README block.
RESERVE=5 part paper-all $J reproduce all --out "$WORK/paper" --readme README.md --quiet
cp README.md "$OUT/README.md"
tail -n 3 "$WORK"/*.log >> "$LOG" 2>&1
tar -czf "$OUT/paper.tar.gz" -C "$WORK" paper
[ -d "$WORK/study" ] && tar -czf "$OUT/study.tar.gz" -C "$WORK" study
ls -la "$OUT" >> "$LOG"
