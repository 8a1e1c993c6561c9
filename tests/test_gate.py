"""`llmbench gate`: fail a change that makes training slower or hungrier, and say how sure it is.

Speed is judged with sessions as the unit (analysis/decision.py): one session a side against the
prior spread between sessions measured for the strategy on the hardware (H100 zero2: about 1.5%,
zero3 about 9%, docs/results), or against the spread the sides' own sessions (--sessions N) or a
history measure. Runs here have 20 measured steps with 1% seeded noise around their mean (steady()).
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
from llmbench_pytest.report.records import records_from_results
from llmbench_pytest.report.saved_runs import resolve_saved_run
from llmbench_pytest.report.sources import load_records

# synthetic GPU runs of llama-tiny stand for the models the prior was measured on
pytestmark = pytest.mark.usefixtures("prior_for_tiny_gpu_runs")

CFG = "zero2 ws2 seq128 llama-tiny b2x1 bf16"
PRIOR = "spread 1.5% between sessions (prior)"
"""H100 zero2's prior spread between sessions, as decision_spread.json holds it."""


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
        "methods: speed by sessions as the unit*the spread between sessions*",
        "configuration * metric * baseline * current * change * 95% interval * p * verdict * method",
        # one session a side against a 1.5% prior with 4 degrees of freedom: +-5.9%, past the bound
        f"{CFG} *tokens/s *1,024 *1,024 *+0.0% *-5.* .. +6.* *1.000 *inconclusive *t on session means, "
        f"1 vs 1 session(s), {PRIOR}",
        "* step time *0.5000 s *0.5000 s *+0.0% *-5.* .. +6.* *1.000 *inconclusive *",
        "* peak memory *40.0 GB *40.0 GB *+0.0% *- *- *ok *bound only",
        "Sessions a side that catch a 10% slowdown 95% of the time (to get N: run the suite N times on each "
        "side into one folder and pass --sessions N):",
        f"  {CFG}: 2 (spread 1.5% between sessions, prior: zero2, causal_lm, on NVIDIA H100 80GB HBM3: * "
        "sessions in * groups (docs/results, *))",
        "  zero3 ws2 seq128 llama-tiny b2x1 bf16: * (spread 8.6% between sessions, prior: zero3, *)",
        "gate: passed: 2 configuration(s) compared, 4 inconclusive",
    )


def test_slower_run_fails_listing_baseline_current_and_change(baseline: Path, tmp_path: Path) -> None:
    proc = llmbench("gate", "--baseline", baseline, "--current", current(tmp_path, step=0.60))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # +20% against a 1.5% spread between sessions: far outside it, with one session a side
    assert_lines(
        proc.stdout,
        "2 regression(s):",
        f"  REGRESSION {CFG}: tokens/s 1,024 -> 853 (-16.7%, 95% interval -2*% .. -1*%, p<0.001; "
        f"bound -5.0%; t on session means, 1 vs 1 session(s), {PRIOR})",
        f"  REGRESSION {CFG}: step time 0.5000 s -> 0.6000 s (+20.0%, 95% interval +1*% .. +2*%, "
        f"p<0.001; bound +5.0%; t on session means, 1 vs 1 session(s), {PRIOR})",
        f"{CFG} *tokens/s *1,024 *853 *-16.7% *<0.001 *REGRESSION*",
        "* step time *0.5000 s *0.6000 s *+20.0% *<0.001 *REGRESSION*",
        "* peak memory * ok *",
        "zero3 ws2 * inconclusive *",
        "gate: FAILED: 2 regression(s) in 1 of 2 configuration(s); 2 inconclusive",
    )


def sessions(root: Path, steps: tuple[float, ...], peak_gb: float = 40.0, tag: str = "a") -> Path:
    """A results folder with one zero2 session per step time, each in its own session folder."""
    for k, step in enumerate(steps, start=1):
        d = run("zero2", step, peak_gb, seed=k)
        d["metadata"] = {**d["metadata"], "session": f"{tag}{k:07d}", "started_at": f"2026-11-28T10:0{k}:00"}
        write_run(root / f"20261128-10{k:02d}00-{tag}{k:07d}", d)
    return root


def test_one_session_a_side_meets_the_prior_and_sessions_measure_their_own_spread(tmp_path: Path) -> None:
    """The steps or repeats of one session say nothing about the next session: +10% with one session
    a side of zero2 (1.5% between sessions) cannot be told from noise at alpha 0.01. Three sessions a
    side measure their own spread (2% here), combined with the prior, and settle it."""
    one = llmbench(
        "gate",
        "--baseline",
        repeats(tmp_path / "rep-base", (0.50, 0.51, 0.49)),
        "--current",
        repeats(tmp_path / "rep-cur", (0.55, 0.56, 0.54)),
    )
    assert one.returncode == 0, one.stdout
    assert_lines(
        one.stdout,
        f"  inconclusive {CFG}: step time 0.5000 s -> 0.5500 s (+10.0%, *; bound +5.0%; t on session means, "
        f"1 vs 1 session(s), {PRIOR}); about * sessions a side would settle it (run the suite * times on "
        "each side into one folder and pass --sessions *)",
        "gate: passed: 1 configuration(s) compared, 2 inconclusive",
    )
    three = llmbench(
        "gate",
        "--baseline",
        sessions(tmp_path / "base", (0.50, 0.51, 0.49)),
        "--current",
        sessions(tmp_path / "cur", (0.55, 0.56, 0.54), tag="b"),
        "--sessions",
        "3",
    )
    assert three.returncode == 1, three.stdout
    assert_lines(
        three.stdout,
        f"  REGRESSION {CFG}: step time * (+10.0%, *, p<0.001; bound +5.0%; t on session means, 3 vs 3 "
        "session(s), spread 1.*% between sessions (measured and prior))",
        "gate: FAILED: 2 regression(s) in 1 of 1 configuration(s); 0 inconclusive",
    )


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


def test_interval_that_straddles_the_bound_is_inconclusive_with_the_sessions_that_would_settle_it(
    tmp_path: Path,
) -> None:
    base = sessions(tmp_path / "baseline", (0.50, 0.56, 0.44))
    cur = sessions(tmp_path / "current", (0.545, 0.605, 0.485), tag="b")
    proc = llmbench("gate", "--baseline", base, "--current", cur, "--sessions", "3")
    assert proc.returncode == 0, proc.stdout
    # +9% measured, but 12% between sessions with 3 a side: anywhere from a gain to +30%
    assert_lines(
        proc.stdout,
        "2 inconclusive change(s), the interval reaching past the bound (not failed):",
        f"  inconclusive {CFG}: tokens/s * (-8.*, 95% interval -2*% .. +*%, p=0.*; bound -5.0%; "
        "t on session means, 3 vs 3 session(s), spread *% between sessions (measured and prior)); about * "
        "sessions a side would settle it (run the suite * times on each side into one folder and pass "
        "--sessions *)",
        f"  inconclusive {CFG}: step time * (+9.*, 95% interval -*% .. +*%, p=0.*; bound +5.0%; *)*",
        "gate: passed: 1 configuration(s) compared, 2 inconclusive",
    )
    failing = llmbench("gate", "--baseline", base, "--current", cur, "--sessions", "3", "--fail-inconclusive")
    assert failing.returncode == 1, failing.stdout
    assert_lines(
        failing.stdout,
        "*inconclusive changes fail the gate",
        "gate: FAILED: no regression against the baseline in 1 configuration(s); 2 inconclusive (failing)",
    )


def test_one_session_against_several_takes_the_spread_from_them(tmp_path: Path) -> None:
    base = sessions(tmp_path / "baseline", (0.50, 0.51, 0.49, 0.50))
    cur = write_runs(tmp_path / "current", run("zero2", 0.56, 40.0))
    proc = llmbench("gate", "--baseline", base, "--current", cur, "--sessions", "4")
    assert proc.returncode == 1, proc.stdout
    assert_lines(
        proc.stdout,
        f"  REGRESSION {CFG}: step time 0.4999 s -> 0.5600 s (+12.0%, 95% interval *; "
        "bound +5.0%; t on session means, 4 vs 1 session(s), spread *% between sessions "
        "(measured and prior))",
    )


def test_repeats_of_one_session_are_its_noise_not_the_spread_between_sessions(tmp_path: Path) -> None:
    """--llmbench-repeat=N writes a `repeats` summary: 12% between three repeats of one session is
    that session's own noise (12% / sqrt 3), larger than the prior, and used as the floor."""
    summarised = run("zero2", 0.50, 40.0)
    summarised["repeats"] = {"count": 3, "mean_step_time_sec_mean": 0.50, "mean_step_time_sec_std": 0.06}
    base = write_runs(tmp_path / "baseline", summarised)
    cur = write_runs(tmp_path / "current", run("zero2", 0.54, 40.0))
    proc = llmbench("gate", "--baseline", base, "--current", cur)
    assert proc.returncode == 0, proc.stdout
    assert_lines(
        proc.stdout,
        f"  inconclusive {CFG}: step time 0.5000 s -> 0.5400 s (+8.0%, 95% interval -*% .. +*%, p=0.*; "
        f"bound +5.0%; t on session means, 1 vs 1 session(s), {PRIOR}, 6.9% inside one session (larger, "
        "used))*",
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
    lines = proc.stdout.splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("WARNING: the baseline ran on"))
    # named before any figure: every table and change comes after it
    assert not any("%" in line for line in lines[:warning] if not line.startswith("bounds:")), proc.stdout
    assert_lines(
        proc.stdout,
        "WARNING: the baseline ran on another GPU model: NVIDIA H100 80GB HBM3, the current run on NVIDIA "
        "H200; every difference below mixes hardware with the change. Save a baseline on this hardware "
        "(docs/gate.md), or pass --strict to make this an error.",
        "gate: passed*",
    )
    strict = llmbench("gate", "--baseline", baseline, "--current", cur, "--strict")
    assert_one_line_error(
        strict,
        "llmbench gate: error: the baseline ran on another GPU model: NVIDIA H100 80GB HBM3, the current run "
        "on NVIDIA H200; *Save a baseline on this hardware (docs/gate.md).",
    )


def test_baseline_from_another_device_is_named_and_refused_with_strict(
    baseline: Path, tmp_path: Path
) -> None:
    cpu = write_runs(tmp_path / "cpu", run("zero2", 0.50, 4.0, device="cpu", gpu=None))
    proc = llmbench("gate", "--baseline", baseline, "--current", cpu)
    assert_lines(
        proc.stdout,
        "WARNING: the baseline ran on another device: NVIDIA H100 80GB HBM3, the current run on CPU;*",
    )
    strict = llmbench("gate", "--baseline", baseline, "--current", cpu, "--strict")
    assert_one_line_error(strict, "llmbench gate: error: the baseline ran on another device: *")


def test_a_baseline_that_is_the_current_run_is_refused(baseline: Path, tmp_path: Path) -> None:
    """The same folder twice, or the newest saved run after this session's own autosave."""
    assert_one_line_error(
        llmbench("gate", "--baseline", baseline, "--current", baseline),
        f"llmbench gate: error: the baseline {baseline} is the current run itself ({baseline}): a run gated "
        "against itself passes whatever it measured. Name a saved run of an earlier session*",
    )
    cur = sessions(tmp_path / "results", (0.50,), tag="c")
    store = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    store.mkdir(parents=True)
    saved = benchmark_json([run("zero2", 0.50, 40.0)], gpu="NVIDIA H100 80GB HBM3")
    for bench in saved["benchmarks"]:  # what --benchmark-autosave keeps: the run's own result.json
        bench["extra_info"]["result_json"] = str(next(cur.rglob("result.json")))
    (store / "0001_abc_20261128_100000.json").write_text(json.dumps(saved))
    assert_one_line_error(
        llmbench("gate", "--baseline", tmp_path / ".benchmarks", "--current", cur),
        "llmbench gate: error: the baseline * is the current run itself (session c0000001): *",
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
        # a run saved without its step times is one session all the same
        f"  REGRESSION {CFG}: step time 0.4500 s -> 0.5000 s (+11.1%, 95% interval *, p=0.00*; bound +5.0%; "
        f"t on session means, 1 vs 1 session(s), {PRIOR})",
        "zero3 ws2 * tokens/s *640 *640 *+0.0% * inconclusive *",
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
    # zero3, unchanged: 8.6% between its sessions leaves one session a side unsure of 5%
    assert {c.key.strategy for c in result.inconclusive} == {"zero3"}
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
