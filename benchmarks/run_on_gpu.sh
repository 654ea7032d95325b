#!/usr/bin/env bash
# The GPU measurements, in one call on a GPU machine: every benchmark in quick mode
# (roofline, end to end vs the bare kernel at 10⁶ runs, DQN seed scaling, MinAtar DQN at 1, 100 and
# 1,000 seeds beside rejax's published figure, theory placement,
# XLA:GPU command-buffer variants), writing the README's GPU block, after benchmarks/determinism.py
# (SKIP_DETERMINISM=1 leaves it out; DEADLINE_S does not count it). Bring back OUT.
# Usage (repo root; the GPU machine has no network, so wheels of what its image lacks, gymnax,
# flashbax & co., go in .whl/ beforehand):
#   [DEADLINE_S=480] bash benchmarks/run_on_gpu.sh OUT [--only NAME ...]
# DEADLINE_S stops the benchmarks there; the report and the README block keep every benchmark finished by then.
set -uo pipefail
OUT=${1:?output folder}; shift
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -m jaxreplay info; } > "$OUT/gpu_info.txt" 2>&1
# First (about 4 minutes): does a DQN sweep give the same bits in two processes, as the engine compiles it
# (no autotuning), with XLA's autotuning and with cuBLAS dots, and what does each cost? (benchmarks/determinism.py)
# At 1,000 CartPole runs and 300 MinAtar runs, where the batched dots weigh most (the H200 run of 2026-11-30: about 2x slower untuned):
# CartPole's MLP, then Breakout-MinAtar's convolutional network (whose backward pass has kernels of its own).
rm -rf /tmp/determinism /tmp/determinism-minatar  # (a warm machine keeps an earlier call's folders)
if [ -z "${SKIP_DETERMINISM:-}" ]; then
  timeout 200 python3 -m benchmarks.determinism /tmp/determinism --env CartPole-v1 --seeds 500 --steps 4000 \
    > "$OUT/determinism.log" 2>&1
  timeout 200 python3 -m benchmarks.determinism /tmp/determinism-minatar --env Breakout-MinAtar --seeds 150 \
    --steps 2000 >> "$OUT/determinism.log" 2>&1
fi
cp /tmp/determinism/determinism.md "$OUT/determinism.md" 2>/dev/null
cp /tmp/determinism-minatar/determinism.md "$OUT/determinism_minatar.md" 2>/dev/null
t0=$(date +%s)
timeout "${DEADLINE_S:-3000}" python3 -m benchmarks --quick "$@" --out "$OUT/benchmarks_gpu_quick.md" --readme docs/benchmarks.md 2> "$OUT/benchmarks_gpu.log"
echo "exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/benchmarks_gpu.log"
cp docs/benchmarks.md "$OUT/benchmarks.md"
