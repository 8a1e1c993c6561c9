#!/usr/bin/env bash
# CPU smoke run of the benchmark suite, for a CI job without GPUs: every strategy trains the tiny
# model for real at world sizes 1 and 2 (each a torchrun group), then the report is written.
# It proves the suite and its dependencies work on this commit; CPU timings are not performance
# claims, so nothing here gates on them.
#   usage: ci/cpu-smoke.sh [RESULTS_DIR]
set -euo pipefail
results=${1:-results-cpu-smoke}
# default thresholds: on CPU the timing checks (mean_interval, scaling) record their numbers
# without a verdict, so shared 2-core CI machines cannot fail them; the others judge CPU runs too
pytest benchmarks/ --llmbench-device=cpu --llmbench-world-sizes=1,2 --llmbench-results-dir="$results" \
  --llmbench-report -q
