#!/usr/bin/env bash
# CPU smoke run of the benchmark suite, for a CI job without GPUs: every strategy trains the tiny
# model for real, in one process and as two ranks under torchrun. It proves the suite and its
# dependencies work on this commit; CPU timings are not performance claims.
#   usage: ci/cpu-smoke.sh [RESULTS_DIR]
set -euo pipefail
results=${1:-results-cpu-smoke}
# shared 2-core CI machines make CPU step times swing; the CV check is meant for GPUs
pytest benchmarks/ --llmbench-device=cpu --llmbench-results-dir="$results" --llmbench-max-cv=1 -q
torchrun --standalone --nproc_per_node=2 -m pytest benchmarks/ --llmbench-device=cpu \
  --llmbench-results-dir="$results" --llmbench-max-cv=1 -q
