#!/usr/bin/env bash
# The README's Quick start (`make bench`, `make test`) runs this: it creates or reuses the project's
# environment (.venv), installs what is missing, then runs the benchmarks or the tests in it.
#   tools/dev.sh setup            set up .venv, build DeepSpeed's JIT ops (llmbench ops) and stop
#   tools/dev.sh bench [ARGS...]  then: pytest benchmarks/ --llmbench-report ARGS
#   tools/dev.sh test [ARGS...]   then: ruff check, ruff format --check, pytest -n 3 ARGS
#                                 (LLMBENCH_TEST_WORKERS=N: N pytest-xdist workers, 0 for none;
#                                 LLMBENCH_TEST_SEED=N or ARGS --shuffle-seed=N: replay an order;
#                                 LLMBENCH_TEST_FORKSERVER=0: the sessions tests start as new
#                                 processes, not forks of llmbench_pytest/launch/forkserver.py)
# Environment:
#   LLMBENCH_TORCH   pip arguments that install torch instead of the automatic choice, e.g.
#                    "torch==2.11.0 --index-url https://download.pytorch.org/whl/cu126" (or .../rocm6.4)
#   LLMBENCH_PYTHON  the interpreter that creates .venv (default: python3, else python3.13 ... 3.11)
#   LLMBENCH_VENV    where the environment lives (.venv)
# A second run with nothing changed installs nothing: .venv/.llmbench-installed holds a hash of
# pyproject.toml, this script, the interpreter and the torch choice.
set -euo pipefail
cd "$(dirname "$0")/.."

# the CPU build CI tests with; the PyTorch CPU index has it for Linux and macOS
CPU_TORCH="torch==2.13.0"
CPU_INDEX="https://download.pytorch.org/whl/cpu"
VENV=${LLMBENCH_VENV:-.venv}
STAMP="$VENV/.llmbench-installed"

say() { printf 'llmbench: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 2
}

supported() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

find_python() {
    if [ -n "${LLMBENCH_PYTHON:-}" ]; then
        supported "$LLMBENCH_PYTHON" || die "LLMBENCH_PYTHON=$LLMBENCH_PYTHON is not Python 3.11 or newer"
        echo "$LLMBENCH_PYTHON"
        return
    fi
    for py in python3 python3.13 python3.12 python3.11 python3.14; do
        if command -v "$py" >/dev/null && supported "$py"; then
            echo "$py"
            return
        fi
    done
    die "no Python 3.11 or newer found (tried python3, python3.11-3.14). Install one, or set LLMBENCH_PYTHON=/path/to/python3.x"
}

has_nvidia_gpu() {
    { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; } || [ -e /proc/driver/nvidia/version ]
}

make_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        local py
        py=$(find_python)
        say "creating $VENV with $py ($("$py" --version 2>&1))"
        if ! "$py" -m venv "$VENV"; then
            rm -rf "$VENV"
            die "'$py -m venv $VENV' failed. On Debian or Ubuntu: sudo apt install python3-venv (or python3.X-venv for your version)"
        fi
    fi
    supported "$VENV/bin/python" ||
        die "$VENV has $("$VENV/bin/python" --version 2>&1); llmbench needs 3.11 or newer. Remove $VENV and run again"
    "$VENV/bin/python" -m pip --version >/dev/null 2>&1 ||
        die "$VENV has no pip (a half-made environment?). Remove $VENV and run again"
}

stamp_key() {
    # what decides the installation: a change to any of these installs again
    "$VENV/bin/python" - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
for name in ("pyproject.toml", "tools/dev.sh"):
    h.update(open(name, "rb").read())
h.update(f"{sys.version}|{sys.executable}|{sys.argv[1]}".encode())
print(h.hexdigest())
PY
}

install_torch() {
    local gpu=$1 pip=("$VENV/bin/python" -m pip install -q)
    if [ -n "${LLMBENCH_TORCH:-}" ]; then
        say "installing torch: pip install $LLMBENCH_TORCH (LLMBENCH_TORCH)"
        # shellcheck disable=SC2086  # pip arguments, split on purpose
        "${pip[@]}" $LLMBENCH_TORCH
        return
    fi
    local have
    have=$("$VENV/bin/python" -c 'import torch; print("cuda" if torch.version.cuda else "cpu", torch.__version__)' \
        2>/dev/null || echo "none")
    if [ "$gpu" = 1 ]; then
        case $have in
        cuda*)
            say "keeping torch ${have#* } (a CUDA build)"
            return
            ;;
        cpu*)
            say "replacing torch ${have#* } (a CPU build) with a CUDA build: an NVIDIA GPU is present"
            "$VENV/bin/python" -m pip uninstall -q -y torch
            ;;
        esac
        say "installing torch, the CUDA build (an NVIDIA GPU is present): pip install torch"
        "${pip[@]}" torch
    elif [ "$have" != "none" ]; then
        say "keeping torch ${have#* }"
    elif reachable "$CPU_INDEX/torch/"; then
        # PyPI's Linux torch is the CUDA build: several GB that a CPU does not use
        say "installing torch, the CPU build (no NVIDIA GPU): pip install $CPU_TORCH --index-url $CPU_INDEX"
        "${pip[@]}" "$CPU_TORCH" --index-url "$CPU_INDEX"
    else
        # a machine behind a mirror: pip would retry the CPU index for every package, so ask the
        # configured indexes for the pinned version (where the mirror has a CPU build, pip takes it)
        say "the PyTorch CPU index is unreachable; installing $CPU_TORCH from pip's configured indexes" \
            "(on Linux this may be the CUDA build; LLMBENCH_TORCH chooses another)"
        "${pip[@]}" "$CPU_TORCH"
    fi
}

reachable() {
    "$VENV/bin/python" - "$1" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="HEAD"), timeout=10).close()
except Exception:
    sys.exit(1)
PY
}

setup() {
    make_venv
    local gpu=0 extras=test
    if has_nvidia_gpu; then
        gpu=1
        extras=test,gpu
    fi
    local key
    key=$(stamp_key "gpu=$gpu torch=${LLMBENCH_TORCH:-auto}")
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$key" ]; then
        say "$VENV is up to date; nothing to install"
        return
    fi
    local start=$SECONDS
    rm -f "$STAMP"
    install_torch "$gpu"
    # pin the torch just chosen, so no dependency swaps it for another build behind our back
    local constraints="$VENV/.llmbench-constraints.txt"
    "$VENV/bin/python" -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' >"$constraints"
    say "installing llmbench and its dependencies: pip install -e .[$extras]"
    "$VENV/bin/python" -m pip install -q -c "$constraints" -e ".[$extras]"
    echo "$key" >"$STAMP"
    say "$VENV ready in $((SECONDS - start)) s: $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)')"
}

build_ops() {
    # DeepSpeed's JIT ops (CPU Adam, the CPU shared-memory all-reduce) once per machine, here rather
    # than in the middle of the first session that needs them; found, not rebuilt, next time
    local start=$SECONDS
    "$VENV/bin/llmbench" ops >&2 ||
        say "some DeepSpeed ops could not be built here; the sessions that need them will try again"
    say "DeepSpeed ops ready in $((SECONDS - start)) s"
}

# the value of --llmbench-results-dir among pytest's arguments, or the default
results_dir() {
    local dir=results
    while [ $# -gt 0 ]; do
        case $1 in
        --llmbench-results-dir=*) dir=${1#*=} ;;
        --llmbench-results-dir)
            shift
            dir=${1:-$dir}
            ;;
        esac
        shift || true
    done
    echo "$dir"
}

bench() {
    local dir report status=0
    # each session writes into a folder of its own; results/latest links to the newest
    dir=$(results_dir "$@")/latest
    report="$dir/summary/BENCHMARK_REPORT.md"
    local started="$VENV/.llmbench-bench-started"
    touch "$started"
    "$VENV/bin/python" -m pytest benchmarks/ --llmbench-report "$@" || status=$?
    echo
    if [ "$report" -nt "$started" ]; then
        echo "Report:  $report"
        echo "Plots:   $dir/summary/plots/"
        echo "Metrics: $dir/summary/metrics.csv"
        echo "Runs:    $dir/ (this session's folder: one result.json per configuration)"
    else
        echo "No report written (pytest exit code $status): see the output above."
    fi
    return "$status"
}

run_tests() {
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    # exit code 5 (no test collected) is a failure too: any non-zero code ends this script;
    # the slowest tests are listed so that CI's log shows where its time goes
    # the tests are mostly torchrun groups that wait on gloo, timeouts and signals: three
    # pytest-xdist workers on two cores fill those waits (docs/testing.md: 331 s against 378 s
    # with two; loadgroup keeps the tests that read one shared session on one worker); the order
    # is shuffled, its seed printed in the header
    "$VENV/bin/python" -m pytest -n "${LLMBENCH_TEST_WORKERS:-3}" --dist loadgroup --durations=25 "$@"
}

activate() {
    # torchrun, llmbench and ruff from the environment, for this script and what it starts
    VENV=$(cd "$VENV" && pwd)
    export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
}

command=${1:-}
[ $# -gt 0 ] && shift
case $command in
setup)
    setup
    build_ops
    ;;
bench)
    setup
    build_ops
    activate
    bench "$@"
    ;;
test)
    setup
    build_ops
    activate
    run_tests "$@"
    ;;
*) die "usage: tools/dev.sh setup | bench [pytest args...] | test [pytest args...]" ;;
esac
