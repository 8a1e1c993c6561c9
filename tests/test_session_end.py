"""--llmbench-report and --llmbench-gate: the report and the regression gate inside pytest."""

import json

import pytest

ARGS = ["benchmarks", "--llmbench-launch=inprocess", "--llmbench-strategies=ddp,zero1"]


def test_report_at_session_end(bench):
    result = bench.runpytest_subprocess(*ARGS, "--llmbench-report")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*strategy*ranks*tokens/s*",
            "*CPU smoke*",
            "report: *summary/BENCHMARK_REPORT.md",
            "metrics: *metrics.csv",
        ]
    )
    summary = bench.path / "results" / "summary"
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


def test_gate_fails_the_session_on_a_regression_and_passes_otherwise(bench):
    first = bench.runpytest_subprocess(*ARGS, "--benchmark-autosave", "--benchmark-storage=file://./store")
    first.assert_outcomes(passed=2)
    (saved,) = bench.path.glob("store/*/0001_*.json")
    # five times, not twice: a shared 2-core machine's load moves one run's speed 2-3x between sessions
    _rescale(saved, 0.2, saved.with_name("0002_five_times_as_fast.json"))
    _rescale(saved, 5.0, saved.with_name("0003_five_times_as_slow.json"))

    # host RSS, the memory measure on CPU, moves by a few percent between identical runs
    gate = ["--benchmark-storage=file://./store", "--llmbench-gate-bounds=memory=50%"]
    slower = bench.runpytest_subprocess(*ARGS, *gate, "--llmbench-gate=0002")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED  # every test passed; the gate failed the session
    slower.stdout.fnmatch_lines(["*REGRESSION ddp ws1 seq128 llama-tiny*tokens/s*", "*gate: FAILED*"])

    faster = bench.runpytest_subprocess(*ARGS, *gate, "--llmbench-gate=0003")
    assert faster.ret == pytest.ExitCode.OK
    faster.stdout.fnmatch_lines(["*gate: passed*"])


def _trained_nothing(bench):
    return not list(bench.path.glob("results/*_results/result.json"))


def test_gate_against_a_missing_run_is_refused_before_anything_trains(bench):
    result = bench.runpytest_subprocess(*ARGS, "--benchmark-storage=file://./nowhere", "--llmbench-gate=0001")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmbench-gate: no pytest-benchmark storage at *nowhere*'0001'*"])
    assert _trained_nothing(bench)


def test_gate_naming_no_saved_run_is_refused_before_anything_trains(bench):
    first = bench.runpytest_subprocess(*ARGS, "--benchmark-autosave", "--benchmark-storage=file://./store")
    first.assert_outcomes(passed=2)
    for path in bench.path.glob("results/*"):
        path.rename(bench.path / f"earlier-{path.name}")
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
