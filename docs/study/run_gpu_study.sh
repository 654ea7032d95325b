#!/usr/bin/env bash
# The paper-scale DQN study on one GPU (the device machine), as run for docs/study/.
# Usage (repo root; the GPU machine has no network, so wheels of what its image lacks, gymnax & co.,
# go in .whl/ beforehand): [DEADLINE_S=540] [RESUME=DIR] bash docs/study/run_gpu_study.sh OUT
# A game cut off by the deadline is archived with its chunks as OUT/GAME.chunks.tar.gz: bring it back and
# rerun with RESUME=the folder holding it, on a machine of the same kind, to finish it (the engine
# refuses to mix device kinds); GAMES="Acrobot-v1" runs only the games named; STUDY_ARGS adds options (a CPU
# smoke test: STUDY_ARGS="--quick --steps 400").
set -uo pipefail
OUT=${1:?output folder}
mkdir -p "$OUT"
for a in ${RESUME:-/nonexistent}/*.chunks.tar.gz; do [ -e "$a" ] && tar -xzf "$a" -C "$OUT"; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
LOG="$OUT/study.log"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -m jaxreplay info; } > "$LOG" 2>&1
start=$(date +%s)
# game  seeds  chunk (runs per compiled call)
for spec in "CartPole-v1 100 800" "MountainCar-v0 100 800" "Acrobot-v1 100 800"; do
  set -- $spec
  case " ${GAMES:-$1} " in *" $1 "*) ;; *) continue ;; esac
  t0=$(date +%s)
  left=$(( ${DEADLINE_S:-540} - ($(date +%s) - start) ))
  [ "$left" -gt 30 ] || { echo "$1: skipped (no time left)" >> "$LOG"; continue; }
  timeout "$left" python3 -m jaxreplay study dqn --env "$1" --seeds "$2" --chunk-size "$3" ${STUDY_ARGS:-} --out "$OUT/$1" --quiet >> "$LOG" 2>&1
  rc=$?
  echo "$1: exit $rc in $(( $(date +%s) - t0 )) s (total $(( $(date +%s) - start )) s)" >> "$LOG"
  [ $rc -eq 0 ] || tar -czf "$OUT/$1.chunks.tar.gz" -C "$OUT" "$1"
  tar -czf "$OUT/$1.tar.gz" -C "$OUT" --exclude=chunks "$1" && rm -rf "$OUT/$1"
done
