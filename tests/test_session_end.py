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
    target.write_text(json.dumps(data))


def test_gate_fails_the_session_on_a_regression_and_passes_otherwise(bench):
    first = bench.runpytest_subprocess(*ARGS, "--benchmark-autosave", "--benchmark-storage=file://./store")
    first.assert_outcomes(passed=2)
    (saved,) = bench.path.glob("store/*/0001_*.json")
    _rescale(saved, 0.5, saved.with_name("0002_twice_as_fast.json"))
    _rescale(saved, 2.0, saved.with_name("0003_twice_as_slow.json"))

    # host RSS, the memory measure on CPU, moves by a few percent between identical runs
    gate = ["--benchmark-storage=file://./store", "--llmbench-gate-bounds=memory=50%"]
    slower = bench.runpytest_subprocess(*ARGS, *gate, "--llmbench-gate=0002")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED  # every test passed; the gate failed the session
    slower.stdout.fnmatch_lines(["*REGRESSION ddp ws1 seq128 llama-tiny*tokens/s*", "*gate: FAILED*"])

    faster = bench.runpytest_subprocess(*ARGS, *gate, "--llmbench-gate=0003")
    assert faster.ret == pytest.ExitCode.OK
    faster.stdout.fnmatch_lines(["*gate: passed*"])


def test_gate_against_a_missing_run_fails_with_the_reason(bench):
    result = bench.runpytest_subprocess(*ARGS, "--benchmark-storage=file://./nowhere", "--llmbench-gate=0001")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*llmbench gate could not compare: no saved run in *nowhere match '0001'*"])


def test_bad_gate_bounds_are_refused(bench):
    result = bench.runpytest_subprocess(*ARGS, "--llmbench-gate=1", "--llmbench-gate-bounds=speed=5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmbench-gate-bounds: expected name=value pairs*got 'speed=5%'*"])
