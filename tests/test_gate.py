"""`llmbench gate`: fail a change that makes training slower or hungrier, and say how sure it is.

Runs here have 20 measured steps with 1% seeded noise around their mean step time (steady()), so a
single run a side is compared by the block bootstrap of its step times; make_result's own 4
alternating steps are too few for it (the gate then compares with the bound alone).
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest
from test_compare import H200, benchmark_json
from test_report import assert_lines, assert_one_line_error, llmbench, make_result, write_run, write_runs

from llmbench_pytest.report import ReportError
from llmbench_pytest.report.gate import GateBounds, parse_bound, run_gate
from llmbench_pytest.report.records import load_records, records_from_results, resolve_saved_run

CFG = "zero2 ws2 seq128 llama-tiny b2x1 bf16"
ONE_RUN_CAVEAT = (
    "judged one run a side from its steps alone, blind to run-to-run noise*: rerun both sides with "
    "--llmbench-repeat=N (3 or more), or pass --history DIR"
)
STEPS_ONLY = (
    "configuration(s) judged one run a side from their steps alone, blind to run-to-run noise*: rerun "
    "both sides with --llmbench-repeat=N (3 or more), or pass --history DIR"
)


def with_steps(result: dict[str, Any], times: list[float]) -> dict[str, Any]:
    """The result with these measured step times, and every number that follows from them."""
    per_step = result["tokens_per_sec"] * result["mean_step_time_sec"]
    samples = result["samples_per_sec"] * result["mean_step_time_sec"]
    mean = statistics.fmean(times)
    std = statistics.stdev(times)
    return {
        **result,
        "step_times_sec": times,
        "mean_step_time_sec": mean,
        "step_time_std_sec": std,
        "step_cv_in_run": std / mean,
        "tokens_per_sec": per_step / mean,
        "samples_per_sec": samples / mean,
    }


def steady(result: dict[str, Any], noise: float = 0.01, steps: int = 20, seed: int = 0) -> dict[str, Any]:
    """20 step times with seeded Gaussian noise (relative sd `noise`), rescaled so that their mean
    is exactly the result's mean step time."""
    rng = random.Random(seed)
    raw = [1 + rng.gauss(0, noise) for _ in range(steps)]
    scale = result["mean_step_time_sec"] / statistics.fmean(raw)
    return with_steps(result, [x * scale for x in raw])


def run(strategy: str, step: float, peak_gb: float, seed: int = 0, **kw: Any) -> dict[str, Any]:
    return steady(make_result(strategy, 2, step=step, peak_gb=peak_gb, **kw), seed=seed)


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    return write_runs(tmp_path / "baseline", run("zero2", 0.50, 40.0), run("zero3", 0.80, 25.0))


def current(tmp_path: Path, step: float = 0.50, peak_gb: float = 40.0, **zero2: Any) -> Path:
    zero2_run = make_result("zero2", 2, step=step, peak_gb=peak_gb, **zero2)
    if zero2_run["status"] == "ok":
        zero2_run = steady(zero2_run)
    return write_runs(tmp_path / "current", zero2_run, run("zero3", 0.80, 25.0))


def test_unchanged_run_passes(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_lines(
        proc.stdout,
        f"llmbench gate: baseline {baseline} (NVIDIA H100 80GB HBM3)",
        "bounds: tokens/s -5.0%, step time +5.0%, peak memory +5.0%; a regression must also be significant "
        "at alpha 0.01 (95% intervals); inconclusive changes reported, not failed",
        "methods: runs as the unit where a side has 2+ runs*; one run a side: t-test against the run-to-run "
        "spread of earlier runs (--history), else a block bootstrap*",
        "configuration * metric * baseline * current * change * 95% interval * p * verdict * method",
        # the same step times on both sides: no change, and the bootstrap p-value near 1
        f"{CFG} *tokens/s *1,024 *1,024 *+0.0% *-0.* .. +0.* 0.9* ok *block bootstrap, 20 vs 20 steps*",
        "* step time *0.5000 s *0.5000 s *+0.0% *-0.* .. +0.* 0.9* ok *block bootstrap*",
        "* peak memory *40.0 GB *40.0 GB *+0.0% *- *- *ok *bound only",
        f"gate: passed: 2 configuration(s) compared, 0 inconclusive; 2 of 2 {STEPS_ONLY}",
    )


def test_slower_run_fails_listing_baseline_current_and_change(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path, step=0.55))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # +10% on 1% step noise: the interval is a point or so wide, and p as small as 4,000 resamples go.
    # Block 7: these 20 steps' lag-1 autocorrelation is -0.41 by chance, which Politis and White's
    # rule (and arch's, to the digit) takes for correlation and answers with its cap, ceil(20 / 3)
    assert_lines(
        proc.stdout,
        "2 regression(s):",
        f"  REGRESSION {CFG}: tokens/s 1,024 -> 931 (-9.1%, 95% interval -9.* .. -8.*, p<0.001; "
        f"bound -5.0%; block bootstrap, 20 vs 20 steps, block 7); {ONE_RUN_CAVEAT}",
        f"  REGRESSION {CFG}: step time 0.5000 s -> 0.5500 s (+10.0%, 95% interval +9.* .. +10.*, "
        f"p<0.001; bound +5.0%; block bootstrap*); {ONE_RUN_CAVEAT}",
        f"{CFG} *tokens/s *1,024 *931 *-9.1% *-9.* .. -8.* <0.001 *REGRESSION*",
        "* step time *0.5000 s *0.5500 s *+10.0% *+9.* .. +10.* <0.001 *REGRESSION*",
        "* peak memory * ok *",
        "zero3 ws2 * ok *",
        f"gate: FAILED: 2 regression(s) in 1 of 2 configuration(s); 0 inconclusive; 2 of 2 {STEPS_ONLY}",
    )


def test_one_run_a_side_from_its_steps_says_so_and_names_the_cure_and_repeats_do_not(tmp_path: Path) -> None:
    """The block bootstrap of one run a side sees the noise between steps only: on a shared CPU it
    flagged 30% of A/A comparisons (docs/reports.md). Its verdicts say so, with the cure; a
    comparison of repeats on both sides has run-to-run noise in it and no such caveat."""
    one = llmbench(
        "gate",
        "--baseline",
        write_runs(tmp_path / "one-base", run("zero2", 0.50, 40.0)),
        "--current",
        write_runs(tmp_path / "one-cur", run("zero2", 0.55, 40.0, seed=1)),
    )
    assert one.returncode == 1, one.stdout
    assert_lines(
        one.stdout,
        f"  REGRESSION {CFG}: step time 0.5000 s -> 0.5500 s (*; block bootstrap, 20 vs 20 steps, *); "
        "judged one run a side from its steps alone, blind to run-to-run noise (on a shared CPU, 30% "
        "of A/A comparisons were false alarms): rerun both sides with --llmbench-repeat=N (3 or more), "
        "or pass --history DIR",
        "gate: FAILED: 2 regression(s) in 1 of 1 configuration(s); 0 inconclusive; 1 of 1 configuration(s) "
        "judged one run a side from their steps alone, blind to run-to-run noise (on a shared CPU, 30% "
        "of A/A comparisons were false alarms): rerun both sides with --llmbench-repeat=N (3 or more), "
        "or pass --history DIR",
    )
    both = llmbench(
        "gate",
        "--baseline",
        repeats(tmp_path / "rep-base", (0.50, 0.51, 0.49)),
        "--current",
        repeats(tmp_path / "rep-cur", (0.55, 0.56, 0.54)),
    )
    assert both.returncode == 1, both.stdout
    assert_lines(
        both.stdout,
        f"  REGRESSION {CFG}: step time * (*; bound +5.0%; Student t, 3 vs 3 runs)",
        "gate: FAILED: 2 regression(s) in 1 of 1 configuration(s); 0 inconclusive",
    )
    assert both.stdout.rstrip().endswith("0 inconclusive")
    for caveat in (
        "judged one run a side",
        "blind to",
        "false alarm",
        "--llmbench-repeat=N",
        "--history DIR",
    ):
        assert caveat not in both.stdout


def test_hungrier_run_fails(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path, peak_gb=44.0))
    assert proc.returncode == 1
    assert_lines(
        proc.stdout,
        f"  REGRESSION {CFG}: peak memory 40.0 GB -> 44.0 GB (+10.0%; bound +5.0%; "
        "bound only: one peak a side, no sample to test)",
        "gate: FAILED: 1 regression(s) in 1 of 2 configuration(s)*",
    )


def repeats(root: Path, steps: tuple[float, ...], peak_gb: float = 40.0) -> Path:
    """A results folder with one zero2 run per step time: repeats of one configuration."""
    root.mkdir()
    for k, step in enumerate(steps, start=1):
        write_run(root, run("zero2", step, peak_gb, seed=k), repeat=k)
    return root


def test_runs_are_the_unit_where_there_are_repeats(tmp_path: Path) -> None:
    base = repeats(tmp_path / "baseline", (0.50, 0.51, 0.49))
    cur = repeats(tmp_path / "current", (0.55, 0.56, 0.54))
    proc = llmbench("gate", "--baseline", base, "--current", cur)
    assert proc.returncode == 1, proc.stdout
    # run means 0.50 +- 0.01 against 0.55 +- 0.01: Student's t on the logs with 4 degrees of freedom
    assert_lines(
        proc.stdout,
        f"  REGRESSION {CFG}: step time 0.4999 s -> 0.5499 s (+10.0%, 95% interval +*, p=0.00*; "
        "bound +5.0%; Student t, 3 vs 3 runs)",
    )


def test_interval_that_straddles_the_bound_is_inconclusive_with_the_runs_that_would_settle_it(
    tmp_path: Path,
) -> None:
    base = repeats(tmp_path / "baseline", (0.50, 0.56, 0.44))
    cur = repeats(tmp_path / "current", (0.545, 0.605, 0.485))
    proc = llmbench("gate", "--baseline", base, "--current", cur)
    assert proc.returncode == 0, proc.stdout
    # +9% measured, but 12% run-to-run spread with 3 runs a side: anywhere from a gain to +30%
    assert_lines(
        proc.stdout,
        "2 inconclusive change(s), the interval reaching past the bound (not failed):",
        f"  inconclusive {CFG}: tokens/s * (-8.*, 95% interval -2*% .. +1*%, p=0.*; bound -5.0%; "
        "Student t, 3 vs 3 runs); about * runs a side would settle it (--llmbench-repeat)",
        f"  inconclusive {CFG}: step time 0.4976 s -> 0.5428 s (+9.1%, 95% interval -16.1% .. +41.8%, "
        "p=0.410; bound +5.0%; Student t, 3 vs 3 runs); about 26 runs a side would settle it "
        "(--llmbench-repeat)",
        "gate: passed: 1 configuration(s) compared, 2 inconclusive",
    )
    failing = llmbench("gate", "--baseline", base, "--current", cur, "--fail-inconclusive")
    assert failing.returncode == 1, failing.stdout
    assert_lines(
        failing.stdout,
        "*inconclusive changes fail the gate",
        "gate: FAILED: no regression against the baseline in 1 configuration(s); 2 inconclusive (failing)",
    )


def test_one_run_against_repeats_takes_the_spread_from_the_repeats(tmp_path: Path) -> None:
    base = repeats(tmp_path / "baseline", (0.50, 0.51, 0.49, 0.50))
    cur = write_runs(tmp_path / "current", run("zero2", 0.56, 40.0))
    proc = llmbench("gate", "--baseline", base, "--current", cur)
    assert proc.returncode == 1, proc.stdout
    assert_lines(
        proc.stdout,
        f"  REGRESSION {CFG}: step time 0.4999 s -> 0.5600 s (+12.0%, 95% interval *; "
        "bound +5.0%; t, 4 vs 1 runs (spread from the repeats))",
    )


def test_repeats_summary_in_one_result_gives_the_spread(tmp_path: Path) -> None:
    """--llmbench-repeat=N writes a `repeats` summary (mean and std of the repeats' step times)."""
    summarised = run("zero2", 0.50, 40.0)
    summarised["repeats"] = {"count": 3, "mean_step_time_sec_mean": 0.50, "mean_step_time_sec_std": 0.06}
    base = write_runs(tmp_path / "baseline", summarised)
    cur = write_runs(tmp_path / "current", run("zero2", 0.54, 40.0))
    proc = llmbench("gate", "--baseline", base, "--current", cur)
    assert proc.returncode == 0, proc.stdout
    # 12% spread over 3 repeats, one run against them: +8% cannot be told from noise
    assert_lines(
        proc.stdout,
        f"  inconclusive {CFG}: step time 0.5000 s -> 0.5400 s (+8.0%, 95% interval -*% .. +*%, p=0.*; "
        "bound +5.0%; t, 3 vs 1 runs (spread from the repeats))*",
    )


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
            ["--noise-factor", "1"],
            "llmbench gate: error: argument --noise-factor: '1': the noise allowance gave way to a "
            "significance test; drop --noise-factor (--alpha sets the false-alarm rate, default 0.01) (see*",
        ),
        (
            ["--alpha", "5"],
            "llmbench gate: error: --alpha: '5' must be above 0 and at most 0.5; write a significance level "
            "such as 0.01 (the false-alarm rate the gate accepts)",
        ),
        (
            ["--history", ".", "--history-window", "3"],
            "llmbench gate: error: --history-window: 3 earlier runs are too few for the change-point test "
            "at alpha 0.01 (it needs 9 or more); write 9 or more, or 0 for no history",
        ),
    ],
    ids=["bare-5", "not-a-number", "noise-factor-is-gone", "alpha", "history-window"],
)
def test_bad_bounds_are_one_clear_error(
    baseline: Path, tmp_path: Path, args: list[str], pattern: str
) -> None:
    assert_one_line_error(
        llmbench("gate", "--baseline", baseline, "--current", current(tmp_path), *args), pattern
    )


def test_neither_baseline_nor_history_is_a_usage_error(baseline: Path) -> None:
    proc = llmbench("gate", "--current", baseline)
    assert_one_line_error(
        proc, "llmbench gate: error: nothing to compare with: pass --baseline B, --history DIR, or both"
    )


def test_baseline_from_another_gpu_warns_or_with_strict_errors(baseline: Path, tmp_path: Path) -> None:
    cur = write_runs(
        tmp_path / "h200", run("zero2", 0.50, 40.0, gpu=H200), run("zero3", 0.80, 25.0, gpu=H200)
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
    assert_lines(
        proc.stdout, f"  REGRESSION {CFG}: status ok -> oom", f"{CFG} *status *ok *oom *- *- *- *REGRESSION"
    )


def test_nothing_in_common_is_an_error(baseline: Path, tmp_path: Path) -> None:
    other = write_runs(tmp_path / "other", steady(make_result("ddp", 4)))
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
    old = [run("zero2", 0.40, 40.0), run("zero3", 0.60, 25.0)]
    new = [run("zero2", 0.45, 40.0), run("zero3", 0.80, 25.0)]
    (store / "0001_aaa_20261101_000000.json").write_text(
        json.dumps(benchmark_json(old, gpu="NVIDIA H100 80GB HBM3"))
    )
    newest = benchmark_json(new, gpu="NVIDIA H100 80GB HBM3")
    for bench in newest["benchmarks"]:
        del bench["extra_info"]["step_times_sec"]  # saved before llmbench kept them in extra_info
    (store / "0002_bbb_20261102_000000.json").write_text(json.dumps(newest))
    proc = llmbench("gate", "--baseline", tmp_path / ".benchmarks", "--current", current(tmp_path, step=0.50))
    assert proc.returncode == 1, proc.stdout
    assert_lines(
        proc.stdout,
        f"  {store / '0002_bbb_20261102_000000.json'}: "
        f"newest of 2 saved run(s) under {tmp_path / '.benchmarks'}",
        # 0.45 s -> 0.50 s is +11.1%; zero3 unchanged against the newest run (not the 0.60 s of 0001);
        # an older run saved without --benchmark-save-data: no step times to resample
        f"  REGRESSION {CFG}: step time 0.4500 s -> 0.5000 s (+11.1%; bound +5.0%; bound only: one run a "
        "side, 0 and 20 step times kept, 8 needed (a pytest-benchmark run keeps them with "
        "--benchmark-save-data))",
        "zero3 ws2 * tokens/s *640 *640 *+0.0% *- *- *ok *bound only",
    )


def test_gate_api_for_the_pytest_plugin(baseline: Path) -> None:
    """The plugin gates in-process: records from the session's results against a saved run."""
    session = [run("zero2", 0.60, 40.0), run("zero3", 0.80, 25.0)]
    result = run_gate(
        load_records(baseline), records_from_results(session), GateBounds(tokens_drop=parse_bound("5%", "x"))
    )
    assert result.exit_code == 1 and not result.passed
    assert {(c.key.strategy, c.metric) for c in result.regressions} == {
        ("zero2", "tokens/s"),
        ("zero2", "step time"),
    }
    assert result.inconclusive == []
    assert all(c.estimate is not None and c.estimate.p_value is not None for c in result.regressions)
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
