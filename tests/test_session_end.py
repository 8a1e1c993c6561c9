"""--llmbench-report and --llmbench-gate: the report and the regression gate inside pytest."""

import json
import shutil

import pytest

from conftest import RUNS

# eight measured steps a run, fixed, so the gate below is judged the same way in every session,
# whatever an adaptive measurement would stop at
ARGS = [
    "benchmarks",
    "--llmbench-launch=inprocess",
    "--llmbench-strategies=ddp,zero1",
    "--llmbench-warmup=2",  # the default: a fresh process's first configuration settles over two
    "--llmbench-steps=8",
]
SAVED = "saved_session"


@pytest.fixture(scope="session")
def saved_session(shared_bench):
    """One session that writes the report and saves its run to pytest-benchmark storage: the report
    test reads what it printed and wrote, the gate tests gate against (copies of) its storage."""
    bench = shared_bench(SAVED)
    result = bench.runpytest_subprocess(
        *ARGS, "--llmbench-report", "--benchmark-autosave", "--benchmark-storage=file://./store"
    )
    return bench, result


def _copy_store(saved_session, to):
    """The saved run's storage, copied into a test's own directory (the shared one stays as it is)."""
    bench, result = saved_session
    result.assert_outcomes(passed=2)
    shutil.copytree(bench.path / "store", to / "store")
    (saved,) = (to / "store").glob("*/0001_*.json")
    return saved


@pytest.mark.xdist_group(SAVED)
def test_report_at_session_end(saved_session):
    bench, result = saved_session
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*strategy*ranks*tokens/s*",
            "*CPU smoke*",
            "report: *summary/BENCHMARK_REPORT.md",
            "metrics: *metrics.csv",
        ]
    )
    summary = bench.path / "results" / "latest" / "summary"  # this session's own report
    header = (summary / "metrics.csv").read_text().splitlines()[0]
    assert header.startswith(
        "strategy,world_size,rank,seq_len,tier,steps,per_device_batch,grad_accum,tokens_per_sec"
    )
    assert "zero1" in (summary / "BENCHMARK_REPORT.md").read_text()


def _rescale(saved, factor, target):
    """A copy of a saved run as if every step took `factor` times as long."""
    data = json.loads(saved.read_text())
    for bench in data["benchmarks"]:
        for key in ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3", "total"):
            bench["stats"][key] *= factor
        bench["stats"]["ops"] /= factor
        info = bench["extra_info"]
        info["mean_step_time_sec"] *= factor
        info["tokens_per_sec"] /= factor
        info["samples_per_sec"] /= factor
        info["step_times_sec"] = [t * factor for t in info["step_times_sec"]]
    target.write_text(json.dumps(data))


@pytest.mark.xdist_group(SAVED)
def test_gate_fails_the_session_on_a_regression_and_passes_otherwise(bench, saved_session):
    saved = _copy_store(saved_session, bench.path)
    # twenty times, not twice: a shared 2-core machine's load moves one run's speed 2-3x between
    # sessions (the saved session's ddp once ran at 1,385 tokens/s and the gated one at 3,894, so a
    # baseline five times as fast read as an inconclusive -44%, its eight steps spread 40-115 ms)
    _rescale(saved, 0.05, saved.with_name("0002_twenty_times_as_fast.json"))
    _rescale(saved, 20.0, saved.with_name("0003_twenty_times_as_slow.json"))

    # host RSS, the memory measure on CPU, moves by a few percent between identical runs
    gate = ["--benchmark-storage=file://./store", "--llmbench-gate-bounds=memory=50%"]
    slower = bench.runpytest_subprocess(*ARGS, *gate, "--llmbench-gate=0002")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED  # every test passed; the gate failed the session
    slower.stdout.fnmatch_lines(["*REGRESSION * ws1 seq128 llama-tiny*tokens/s*", "*gate: FAILED*"])
    # neither configuration may pass the twenty-fold drop. One whose own eight steps drifted under
    # the machine's load (a fresh process's first configuration has measured a +-130% interval of
    # its mean on the shared CI machine) is honestly inconclusive, never ok
    for strategy in ("ddp", "zero1"):
        (row,) = [
            ln for ln in slower.outlines if ln.startswith(f"{strategy} ws1 seq128") and "tokens/s" in ln
        ]
        assert " REGRESSION " in row or " inconclusive " in row, row

    faster = bench.runpytest_subprocess(*ARGS, *gate, "--llmbench-gate=0003")
    assert faster.ret == pytest.ExitCode.OK
    faster.stdout.fnmatch_lines(["*gate: passed*"])
    # the same command twice into one results/: a folder per session, neither a repeat of the other,
    # and results/latest the second
    first, second = sorted(bench.path.glob(f"{RUNS}/"))
    for folder in (first, second):
        names = sorted(p.name for p in folder.glob("*_results"))
        assert len(names) == 2 and not any("-r2" in n for n in names), names
    assert (bench.path / "results" / "latest").resolve() == second.resolve()
    faster.stdout.fnmatch_lines([f"*2 run(s) recorded under *{second.name} (also *latest):*"])


def _trained_nothing(bench):
    return not list(bench.path.glob(f"{RUNS}/*_results/result.json"))


def test_gate_against_a_missing_run_is_refused_before_anything_trains(bench):
    result = bench.runpytest_subprocess(*ARGS, "--benchmark-storage=file://./nowhere", "--llmbench-gate=0001")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmbench-gate: no pytest-benchmark storage at *nowhere*'0001'*"])
    assert _trained_nothing(bench)


@pytest.mark.xdist_group(SAVED)
def test_gate_naming_no_saved_run_is_refused_before_anything_trains(bench, saved_session):
    _copy_store(saved_session, bench.path)  # storage that holds a saved run, and no results yet
    result = bench.runpytest_subprocess(
        *ARGS, "--benchmark-storage=file://./store", "--llmbench-gate=nonexistent_run"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmbench-gate: no saved run in *store* match 'nonexistent_run'*"])
    assert _trained_nothing(bench)


def test_a_bound_that_is_not_a_number_is_refused_before_anything_trains(bench):
    result = bench.runpytest_subprocess(*ARGS, "--llmbench-gate=latest", "--llmbench-gate-bounds=tokens=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--llmbench-gate-bounds: tokens: 'lots' is not a number; write 5% or 0.05*"]
    )
    assert _trained_nothing(bench)


def test_bad_gate_bounds_are_refused(bench):
    result = bench.runpytest_subprocess(*ARGS, "--llmbench-gate=1", "--llmbench-gate-bounds=speed=5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmbench-gate-bounds: expected name=value pairs*got 'speed=5%'*"])
