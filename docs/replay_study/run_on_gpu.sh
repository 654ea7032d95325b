#!/usr/bin/env bash
# The full replay study (capacity × replay ratio × n-step, then the adaptive stage) on one GPU, one game
# after another, each committed under docs/replay_study/GAME/ when it finishes.
# Usage (repo root on the device machine; it has no network, so the wheels its image lacks, gymnax & co.,
# go in .whl/ beforehand, see benchmarks/run_on_gpu.sh):
#   DEADLINE_S=540 bash docs/replay_study/run_on_gpu.sh OUT [GAME ...]
# STUDY_ARGS replaces "--full" (a smoke test on the CPU: STUDY_ARGS="--quick --seeds 2 --steps 400").
# GAME defaults to the five games, easiest first. A game whose study does not finish before the deadline
# is archived with its chunks: extract OUT/GAME.tar.gz into the same OUT on a machine of the same kind
# (the engine refuses to mix device kinds in one folder) and run this again to resume it.
# Each archive holds GAME/ (report.md, study.json, runs.csv, curves.csv, figures, the sweeps) and the log.
set -uo pipefail
OUT=${1:?output folder}
shift
GAMES=("$@")
[ ${#GAMES[@]} -gt 0 ] || GAMES=(CartPole-v1 Acrobot-v1 MountainCar-v0 Breakout-MinAtar SpaceInvaders-MinAtar)
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
LOG="$OUT/replay_study.log"
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -m jaxreplay info; } >> "$LOG" 2>&1
start=$(date +%s)
for game in "${GAMES[@]}"; do
  # Resume a game left unfinished: its archive in OUT, else the one committed under docs/replay_study/gpu_partial/
  # (the engine refuses it in another program: another device kind, jax or compiler options; then move it aside).
  partial="$OUT/$game.tar.gz"; [ -f "$partial" ] || partial="docs/replay_study/gpu_partial/$game.tar.gz"
  [ -f "$partial" ] && [ ! -d "$OUT/$game" ] && tar -xzf "$partial" -C "$OUT"
  left=$(( ${DEADLINE_S:-540} - ($(date +%s) - start) ))
  [ "$left" -gt 60 ] || { echo "$game: not started (no time left)" >> "$LOG"; continue; }
  t0=$(date +%s)
  # Chunk: 4 × seeds (the command's default) keeps a seed's cells in one program; the study resumes per chunk.
  timeout "$left" python3 -m jaxreplay study replay --env "$game" ${STUDY_ARGS:---full} --out "$OUT/$game" --quiet >> "$LOG" 2>&1
  rc=$?
  echo "$game: exit $rc in $(( $(date +%s) - t0 )) s (total $(( $(date +%s) - start )) s)" >> "$LOG"
  cp "$LOG" "$OUT/$game/" 2>/dev/null
  tar -czf "$OUT/$game.tar.gz" -C "$OUT" "$game" && rm -rf "${OUT:?}/$game"
done
