"""`llmbench gate`: fail a change that makes training slower or hungrier, beyond the measured noise.

Step times in these results alternate step*(1 - j), step*(1 + j), so a run's step-time CV is
j * sqrt(4/3): jitter 0.01 -> 1.2%, jitter 0.10 -> 11.5%.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_compare import H200, benchmark_json
from test_report import assert_lines, assert_one_line_error, llmbench, make_result, write_run, write_runs

from llmbench_pytest.report import ReportError
from llmbench_pytest.report.gate import GateBounds, parse_bound, run_gate
from llmbench_pytest.report.records import load_records, records_from_results, resolve_saved_run

CFG = "zero2 ws2 seq128 llama-tiny b2x1 bf16"


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    return write_runs(
        tmp_path / "baseline",
        make_result("zero2", 2, step=0.50, peak_gb=40.0),
        make_result("zero3", 2, step=0.80, peak_gb=25.0),
    )


def current(tmp_path: Path, **zero2: float | str) -> Path:
    return write_runs(
        tmp_path / "current",
        make_result("zero2", 2, **{"step": 0.50, "peak_gb": 40.0, **zero2}),  # type: ignore[arg-type]
        make_result("zero3", 2, step=0.80, peak_gb=25.0),
    )


def test_unchanged_run_passes(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_lines(
        proc.stdout,
        f"llmbench gate: baseline {baseline} (NVIDIA H100 80GB HBM3)",
        "bounds: tokens/s -5.0%, step time +5.0%, peak memory +5.0%; noise: 1 x the larger measured spread*",
        f"{CFG} *+0.0% *+0.0% *+0.0% *ok",
        "gate: passed: 2 configuration(s) compared, 0 change(s) within noise",
    )


def test_slower_run_fails_listing_baseline_current_and_change(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path, step=0.55))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_lines(
        proc.stdout,
        "2 regression(s):",
        f"  REGRESSION {CFG}: tokens/s 1,024 -> 931 (-9.1%; bound -5.0%, "
        "noise ±1.2% from the step-time CV of *)",
        f"  REGRESSION {CFG}: step time 0.5000 s -> 0.5500 s (+10.0%; bound +5.0%, noise ±1.2%*)",
        f"{CFG} *-9.1% ! *+10.0% ! *+0.0% *REGRESSION",
        "zero3 ws2 * ok",
        "gate: FAILED: 2 regression(s) in 1 of 2 configuration(s); 0 change(s) within noise",
    )


def test_hungrier_run_fails(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path, peak_gb=44.0))
    assert proc.returncode == 1
    assert_lines(
        proc.stdout,
        f"  REGRESSION {CFG}: peak memory 40.0 GB -> 44.0 GB (+10.0%; bound +5.0%, no spread measured)",
        "gate: FAILED: 1 regression(s) in 1 of 2 configuration(s)*",
    )


def test_change_within_the_measured_step_time_spread_is_reported_not_failed(
    baseline: Path, tmp_path: Path
) -> None:
    # +8% step time on a run whose steps vary by 11.5%
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path, step=0.54, jitter=0.10))
    assert proc.returncode == 0, proc.stdout
    assert_lines(
        proc.stdout,
        "2 change(s) past a bound but within the measured noise (not failed):",
        f"  within noise {CFG}: tokens/s 1,024 -> 948 (-7.4%; bound -5.0%, "
        "noise ±11.5% from the step-time CV of the current run)",
        f"  within noise {CFG}: step time 0.5000 s -> 0.5400 s (+8.0%*",
        f"{CFG} *-7.4% ~ *+8.0% ~ *+0.0% *within noise",
        "gate: passed: 2 configuration(s) compared, 2 change(s) within noise",
    )
    # with the allowance off the same change fails
    off = llmbench("gate", "--baseline", baseline, "--current", tmp_path / "current", "--noise-factor", "0")
    assert off.returncode == 1


def test_spread_of_repeated_runs_is_the_noise_when_there_are_repeats(tmp_path: Path) -> None:
    base = tmp_path / "baseline"
    base.mkdir()
    for k, step in enumerate((0.50, 0.56, 0.44), start=1):
        write_run(base, make_result("zero2", 2, step=step, peak_gb=40.0), repeat=k)
    cur = write_runs(tmp_path / "current", make_result("zero2", 2, step=0.54, peak_gb=40.0))
    proc = llmbench("gate", "--baseline", base, "--current", cur)
    assert proc.returncode == 0, proc.stdout
    # repeats' mean step times 0.50, 0.56, 0.44: std 0.06 / mean 0.50 = 12%
    assert_lines(
        proc.stdout,
        f"  within noise {CFG}: step time 0.5000 s -> 0.5400 s (+8.0%; bound +5.0%, noise ±12.0% "
        "from the spread of 3 repeats of the baseline)",
    )


def test_repeats_summary_in_one_result_gives_the_spread(tmp_path: Path) -> None:
    """--llmbench-repeat=N writes a `repeats` summary (mean and std of the repeats' step times)."""
    summarised = make_result("zero2", 2, step=0.50, peak_gb=40.0)
    summarised["repeats"] = {"count": 3, "mean_step_time_sec_mean": 0.50, "mean_step_time_sec_std": 0.06}
    base = write_runs(tmp_path / "baseline", summarised)
    cur = write_runs(tmp_path / "current", make_result("zero2", 2, step=0.54, peak_gb=40.0))
    proc = llmbench("gate", "--baseline", base, "--current", cur)
    assert proc.returncode == 0, proc.stdout
    assert "noise ±12.0% from the spread of 3 repeats of the baseline" in proc.stdout


def test_bounds_can_be_set(baseline: Path, tmp_path: Path) -> None:
    cur = current(tmp_path, step=0.55, peak_gb=44.0)
    args = ["gate", "--baseline", baseline, "--current", cur]
    loose = llmbench(
        *args, "--max-tokens-drop", "10%", "--max-step-time-rise", "0.12", "--max-memory-rise", "15%"
    )
    assert loose.returncode == 0, loose.stdout
    assert "bounds: tokens/s -10.0%, step time +12.0%, peak memory +15.0%" in loose.stdout
    only_memory = llmbench(*args, "--max-tokens-drop", "10%", "--max-step-time-rise", "12%")
    assert only_memory.returncode == 1
    assert_lines(only_memory.stdout, "1 regression(s):", f"  REGRESSION {CFG}: peak memory*")


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (
            ["--max-tokens-drop", "5"],
            "llmbench gate: error: --max-tokens-drop: '5' reads as 500%; write 5% for 5 percent, "
            "or a fraction such as 0.05",
        ),
        (
            ["--max-memory-rise", "lots"],
            "llmbench gate: error: --max-memory-rise: 'lots' is not a number; write 5% or 0.05",
        ),
        (
            ["--noise-factor", "-1"],
            "llmbench gate: error: argument --noise-factor: must be 0 or more; got -1 (see*",
        ),
    ],
    ids=["bare-5", "not-a-number", "negative-noise"],
)
def test_bad_bounds_are_one_clear_error(
    baseline: Path, tmp_path: Path, args: list[str], pattern: str
) -> None:
    assert_one_line_error(
        llmbench("gate", "--baseline", baseline, "--current", current(tmp_path), *args), pattern
    )


def test_missing_baseline_option_is_a_usage_error(baseline: Path) -> None:
    proc = llmbench("gate", "--current", baseline)
    assert_one_line_error(
        proc, "llmbench gate: error: the following arguments are required: --baseline (see*"
    )


def test_baseline_from_another_gpu_warns_or_with_strict_errors(baseline: Path, tmp_path: Path) -> None:
    cur = write_runs(
        tmp_path / "h200",
        make_result("zero2", 2, step=0.50, peak_gb=40.0, gpu=H200),
        make_result("zero3", 2, step=0.80, peak_gb=25.0, gpu=H200),
    )
    proc = llmbench("gate", "--baseline", baseline, "--current", cur)
    assert proc.returncode == 0
    assert_lines(
        proc.stdout,
        "WARNING: the baseline was measured on NVIDIA H100 80GB HBM3 and the current run on NVIDIA H200: "
        "the difference mixes hardware with the change. Refresh the baseline on this GPU model "
        "(docs/reports.md), or pass --strict to make this an error.",
        "gate: passed*",
    )
    strict = llmbench("gate", "--baseline", baseline, "--current", cur, "--strict")
    assert_one_line_error(
        strict,
        "llmbench gate: error: the baseline was measured on NVIDIA H100 80GB HBM3 and the current run "
        "on NVIDIA H200: *Refresh the baseline on this GPU model (docs/reports.md).",
    )


def test_run_that_now_runs_out_of_memory_is_a_regression(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path, status="oom"))
    assert proc.returncode == 1
    assert_lines(proc.stdout, f"  REGRESSION {CFG}: status ok -> oom", f"{CFG} *- *- *- *oom ! *REGRESSION")


def test_nothing_in_common_is_an_error(baseline: Path, tmp_path: Path) -> None:
    other = write_runs(tmp_path / "other", make_result("ddp", 4))
    proc = llmbench("gate", "--baseline", baseline, "--current", other)
    assert proc.returncode == 2
    assert_lines(
        proc.stderr,
        "llmbench gate: error: no configuration in common: the baseline has zero2 ws2 seq128*, "
        "the current run has ddp ws4 seq128* Run the same strategies, world sizes and sequence lengths, "
        "or pick the matching baseline.",
    )


def test_pytest_benchmark_storage_as_baseline_uses_its_newest_saved_run(
    baseline: Path, tmp_path: Path
) -> None:
    store = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    store.mkdir(parents=True)
    old = [make_result("zero2", 2, step=0.40, peak_gb=40.0), make_result("zero3", 2, step=0.60, peak_gb=25.0)]
    new = [make_result("zero2", 2, step=0.45, peak_gb=40.0), make_result("zero3", 2, step=0.80, peak_gb=25.0)]
    (store / "0001_aaa_20261101_000000.json").write_text(
        json.dumps(benchmark_json(old, gpu="NVIDIA H100 80GB HBM3"))
    )
    (store / "0002_bbb_20261102_000000.json").write_text(
        json.dumps(benchmark_json(new, gpu="NVIDIA H100 80GB HBM3"))
    )
    proc = llmbench("gate", "--baseline", tmp_path / ".benchmarks", "--current", current(tmp_path, step=0.50))
    assert proc.returncode == 1, proc.stdout
    assert_lines(
        proc.stdout,
        f"  {store / '0002_bbb_20261102_000000.json'}: "
        f"newest of 2 saved run(s) under {tmp_path / '.benchmarks'}",
        # 0.45 s -> 0.50 s is +11.1%; zero3 unchanged against the newest run (not the 0.60 s of 0001)
        f"  REGRESSION {CFG}: step time 0.4500 s -> 0.5000 s (+11.1%*",
        "zero3 ws2 * ok",
    )


def test_gate_api_for_the_pytest_plugin(baseline: Path) -> None:
    """The plugin gates in-process: records from the session's results against a saved run."""
    session = [
        make_result("zero2", 2, step=0.60, peak_gb=40.0),
        make_result("zero3", 2, step=0.80, peak_gb=25.0),
    ]
    result = run_gate(
        load_records(baseline), records_from_results(session), GateBounds(tokens_drop=parse_bound("5%", "x"))
    )
    assert result.exit_code == 1 and not result.passed
    assert {(c.key.strategy, c.metric) for c in result.regressions} == {
        ("zero2", "tokens/s"),
        ("zero2", "step time"),
    }
    assert result.within_noise == []
    assert result.format().splitlines()[-1].startswith("gate: FAILED: 2 regression(s)")


def test_saved_run_is_found_by_counter_or_latest(tmp_path: Path) -> None:
    """What `--llmbench-gate=0001` resolves through: pytest-benchmark's own way of naming runs."""
    store = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    store.mkdir(parents=True)
    for name in ("0001_aaa_20261101.json", "0002_bbb_20261102.json"):
        (store / name).write_text(json.dumps(benchmark_json([make_result("zero2", 2)])))
    root = tmp_path / ".benchmarks"
    assert resolve_saved_run("0001", root).name == "0001_aaa_20261101.json"
    assert resolve_saved_run("1", root).name == "0001_aaa_20261101.json"
    assert resolve_saved_run("latest", root).name == "0002_bbb_20261102.json"
    assert resolve_saved_run("bbb", root).name == "0002_bbb_20261102.json"
    with pytest.raises(ReportError, match=r"no saved run in .* match '0007' \(newest there: 0001_aaa"):
        resolve_saved_run("0007", root)
    with pytest.raises(ReportError, match=r"2 saved runs in .* match '_2026'"):
        resolve_saved_run("_2026", root)
