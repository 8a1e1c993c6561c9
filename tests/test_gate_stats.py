"""The gate's statistics: each behaviour with a case that would fail if the method were wrong.

Unit tests on analysis/significance.py with seeded synthetic data, the history check through
`llmbench gate --history` on saved runs, and the session-start checks of the gate's settings.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
from test_compare import benchmark_json
from test_gate import run
from test_report import assert_lines, llmbench, write_run, write_runs

from llmbench_pytest.analysis.significance import (
    EXACT,
    IMPROVED,
    INCONCLUSIVE,
    OK,
    REGRESSION,
    RunSummary,
    change_point,
    compare_runs,
    decide,
    repeats_to_settle,
    run_spread,
)
from llmbench_pytest.analysis.stats import mean_interval, t_quantile
from llmbench_pytest.config.gate_bounds import min_history, parse_gate_bounds
from llmbench_pytest.config.spec import SpecError
from llmbench_pytest.report import ReportError
from llmbench_pytest.report.gate import GateBounds, gate_session, run_gate
from llmbench_pytest.report.gate.settings import check_gate_baseline
from llmbench_pytest.report.records import records_from_results

# synthetic GPU runs of llama-tiny stand for the models the prior was measured on
pytestmark = pytest.mark.usefixtures("prior_for_tiny_gpu_runs")

CFG = "zero2 ws2 seq128 llama-tiny b2x1 bf16"


def runs(rng: random.Random, mean: float, cv: float, n: int) -> list[float]:
    return [mean * math.exp(rng.gauss(0, cv)) for _ in range(n)]


# -- intervals and p-values -------------------------------------------------------------------


def test_identical_samples_are_no_change_with_p_near_one() -> None:
    same = compare_runs(RunSummary.of([1.0, 1.01, 0.995]), RunSummary.of([1.0, 1.01, 0.995]))
    assert same.p_value == pytest.approx(1.0)
    assert decide(same, 0.05, True, 0.01) == OK
    # the same runs, but 2.5% apart: three a side cannot rule out a 5% change in either direction
    noisy = compare_runs(RunSummary.of([1.0, 1.03, 0.98]), RunSummary.of([1.0, 1.03, 0.98]))
    assert noisy.p_value == pytest.approx(1.0) and decide(noisy, 0.05, True, 0.01) == INCONCLUSIVE


def test_ten_percent_slowdown_with_enough_repeats_is_a_regression_and_its_reverse_an_improvement() -> None:
    rng = random.Random(7)
    base, cur = runs(rng, 1.0, 0.02, 5), runs(rng, 1.10, 0.02, 5)
    est = compare_runs(RunSummary.of(base), RunSummary.of(cur))
    assert est.method == "Student t, 5 vs 5 runs"
    assert est.p_value is not None and est.p_value < 0.001
    assert est.interval[0] > 0.05  # the whole interval past the bound
    assert decide(est, 0.05, True, 0.01) == REGRESSION
    # tokens/s is the same comparison turned over: a fall past the bound
    tokens = est.inverse(1 / est.base, 1 / est.cur)
    assert tokens.interval[1] < -0.05 and decide(tokens, 0.05, False, 0.01) == REGRESSION
    back = compare_runs(RunSummary.of(cur), RunSummary.of(base))
    assert decide(back, 0.05, True, 0.01) == IMPROVED


def test_significant_change_inside_the_bound_is_ok() -> None:
    rng = random.Random(3)
    est = compare_runs(RunSummary.of(runs(rng, 1.0, 0.002, 5)), RunSummary.of(runs(rng, 1.02, 0.002, 5)))
    assert est.p_value is not None and est.p_value < 0.001
    assert decide(est, 0.05, True, 0.01) == OK


def test_interval_straddling_the_bound_is_inconclusive_with_a_count_of_runs_that_settles_it() -> None:
    base, cur = [1.0, 1.04, 0.96], [1.09 * x for x in (1.0, 1.04, 0.96)]
    est = compare_runs(RunSummary.of(base), RunSummary.of(cur))
    lo, hi = est.interval
    assert lo < 0.05 < hi
    assert decide(est, 0.05, True, 0.01) == INCONCLUSIVE
    n = repeats_to_settle(est, 0.05, True, 0.01)
    assert n is not None and 3 < n < 30
    # with n runs a side and the same spread the verdict is reached; with n - 1 it is not yet
    sd = RunSummary.of(base).sd_log
    grown = [compare_runs(RunSummary(k, 0.0, sd), RunSummary(k, math.log(1.09), sd)) for k in (n - 1, n)]
    assert [decide(e, 0.05, True, 0.01) for e in grown] == [INCONCLUSIVE, REGRESSION]
    # a change just inside the bound, on 4% noise: no count of runs up to 100 narrows the interval enough
    on_bound = compare_runs(RunSummary.of(base), RunSummary.of([1.049 * x for x in base]))
    assert repeats_to_settle(on_bound, 0.05, True, 0.01) is None


def test_a_false_alarm_rate_at_most_alpha_and_the_power_to_catch_ten_percent_with_three_runs() -> None:
    """2,000 simulated A/A and A/B comparisons of 3 runs a side with 1.5% run-to-run noise (at 2%,
    the power falls to about 80%; docs/reports.md has the curve)."""
    rng = random.Random(11)
    trials = 2000
    alarms = sum(
        decide(
            compare_runs(RunSummary.of(runs(rng, 1, 0.015, 3)), RunSummary.of(runs(rng, 1, 0.015, 3))),
            0.05,
            True,
            0.01,
        )
        == REGRESSION
        for _ in range(trials)
    )
    significant = sum(
        (
            compare_runs(RunSummary.of(runs(rng, 1, 0.015, 3)), RunSummary.of(runs(rng, 1, 0.015, 3))).p_value
            or 1
        )
        < 0.01
        for _ in range(trials)
    )
    caught = sum(
        decide(
            compare_runs(RunSummary.of(runs(rng, 1, 0.015, 3)), RunSummary.of(runs(rng, 1.1, 0.015, 3))),
            0.05,
            True,
            0.01,
        )
        == REGRESSION
        for _ in range(trials)
    )
    assert alarms / trials <= 0.01
    assert significant / trials == pytest.approx(0.01, abs=0.006)  # the t-test holds its level
    assert caught / trials >= 0.8


# -- t quantiles (analysis/stats.py: mean_interval, and through it adaptive stopping) ------------


@pytest.mark.parametrize("p", [0.5, 0.6, 0.9, 0.95, 0.975, 0.995, 0.9995, 0.025])
def test_t_quantile_is_exact_at_any_degrees_of_freedom(p: float) -> None:
    from scipy import stats

    between_one_and_two = [1.01, 1.1, 1.25, 1.5, 1.75, 1.99]
    dofs = [0.5, 1, *between_one_and_two, 2, 2.01, 2.5, 2.99, 3, 4.7, 7, 10, 29.5, 100, 1e3, 1e5, 1e7]
    for dof in dofs:
        assert t_quantile(p, dof) == pytest.approx(float(stats.t.ppf(p, dof)), rel=1e-9, abs=1e-12), dof


def test_t_quantile_between_one_and_two_degrees_of_freedom_is_not_the_value_at_two() -> None:
    """The old formula returned the 2-dof quantile, 4.303, for every dof in (1, 2]."""
    assert t_quantile(0.975, 1.01) == pytest.approx(12.41, abs=0.005)
    assert t_quantile(0.975, 1.5) == pytest.approx(6.017, abs=0.001)
    assert t_quantile(0.975, 2) == pytest.approx(4.303, abs=0.001)
    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=0.001)
    for bad_p, bad_dof in ((0, 3), (1, 3), (0.975, 0), (0.975, -1), (0.975, math.nan)):
        with pytest.raises(ValueError, match="a t quantile needs"):
            t_quantile(bad_p, bad_dof)


def test_mean_interval_of_few_effective_steps_uses_their_quantile() -> None:
    """Ten steps in a slow wave: lag-1 autocorrelation 0.64, 2.2 effective steps, so the interval's
    t has 1.2 degrees of freedom: 8.75, where the old formula used 4.30 (an interval half as wide)."""
    from scipy import stats

    times = [1.00, 1.01, 1.02, 1.02, 1.01, 1.00, 0.99, 0.98, 0.99, 1.01]
    mi = mean_interval(times)
    assert mi is not None and mi.effective_steps == pytest.approx(2.19, abs=0.01)
    se = statistics.stdev(times) / math.sqrt(mi.effective_steps)
    q = float(stats.t.ppf(0.975, mi.effective_steps - 1))
    assert mi.half_width == pytest.approx(q * se, rel=1e-9)
    assert q == pytest.approx(8.75, abs=0.01)


def test_equal_peaks_compare_exactly_and_one_peak_a_side_only_against_the_bound(tmp_path: Path) -> None:
    exact = compare_runs(RunSummary.of([2.0, 2.0, 2.0]), RunSummary.of([2.2, 2.2]))
    assert exact.kind == EXACT and exact.p_value == 0 and decide(exact, 0.05, True, 0.01) == REGRESSION
    single = run_gate(
        records_from_results([run("zero2", 0.5, 40.0)]), records_from_results([run("zero2", 0.5, 41.0)])
    )
    (memory,) = [c for c in single.changes if c.metric == "peak memory"]
    assert memory.estimate is not None and not memory.estimate.tested
    assert memory.verdict == OK and memory.p() == "-"
    assert "bound only: one peak a side, no sample to test" in memory.line()


def test_a_pytest_benchmark_saved_run_is_one_session(tmp_path: Path) -> None:
    store = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    store.mkdir(parents=True)
    saved = benchmark_json([run("zero2", 0.50, 40.0)], gpu="NVIDIA H100 80GB HBM3")
    saved["benchmarks"][0]["stats"]["data"] = run("zero2", 0.50, 40.0)["step_times_sec"]
    (store / "0001_aaa.json").write_text(json.dumps(saved))
    cur = write_runs(tmp_path / "current", run("zero2", 0.60, 40.0, seed=1))
    proc = llmbench("gate", "--baseline", tmp_path / ".benchmarks", "--current", cur)
    assert proc.returncode == 1, proc.stdout
    assert_lines(
        proc.stdout,
        f"  REGRESSION {CFG}: tokens/s *p<0.001; bound -5.0%; t on session means, 1 vs 1 session(s), "
        "spread 1.5% between sessions (prior))",
    )


# -- history ----------------------------------------------------------------------------------


def test_slow_drift_is_flagged_though_no_run_is_past_the_bound_of_the_one_before() -> None:
    rng = random.Random(2)
    drift = [1.01**i * math.exp(rng.gauss(0, 0.004)) for i in range(15)]
    assert max(b / a - 1 for a, b in itertools.pairwise(drift)) < 0.05
    cp = change_point(drift)
    assert cp.p_value < 0.01
    assert cp.change > 0.05  # the newest runs against the level before the change
    assert cp.change > cp.step  # and more of the drift than the two halves' difference


def test_flat_history_has_no_change_point_and_a_step_is_found_where_it_is() -> None:
    rng = random.Random(4)
    flat = [math.exp(rng.gauss(0, 0.01)) for _ in range(15)]
    assert change_point(flat).p_value > 0.05
    step = flat[:9] + [1.08 * x for x in flat[9:]]
    cp = change_point(step)
    assert cp.split == 9 and cp.p_value < 0.01 and cp.change == pytest.approx(0.08, abs=0.02)


def saved_runs(store: Path, steps: list[float], data: bool = False) -> None:
    """One pytest-benchmark saved run per step time; with `data`, as --benchmark-save-data saves."""
    store.mkdir(parents=True, exist_ok=True)
    for i, step in enumerate(steps, start=1):
        result = run("zero2", step, 40.0, seed=i)
        saved = benchmark_json([result], gpu="NVIDIA H100 80GB HBM3")
        if data:
            saved["benchmarks"][0]["stats"]["data"] = result["step_times_sec"]
        (store / f"{i:04d}_c{i:03d}_2026.json").write_text(json.dumps(saved))


def test_gate_history_flags_a_drift_that_each_comparison_passes(tmp_path: Path) -> None:
    store = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    drift = [0.50 * 1.015**i for i in range(12)]  # +1.5% a run
    saved_runs(store, drift)
    cur = write_runs(tmp_path / "current", run("zero2", 0.50 * 1.015**12, 40.0, seed=99))
    # against the newest saved run alone: +1.5%, inside the bound
    alone = llmbench("gate", "--baseline", tmp_path / ".benchmarks", "--current", cur)
    assert alone.returncode == 0, alone.stdout
    proc = llmbench(
        "gate",
        "--baseline",
        tmp_path / ".benchmarks",
        "--current",
        cur,
        "--history",
        tmp_path / ".benchmarks",
    )
    assert proc.returncode == 1, proc.stdout
    assert_lines(
        proc.stdout,
        f"History ({tmp_path / '.benchmarks'}, up to 20 earlier runs per configuration):",
        # +1.5% a run: the newest three runs are 10-14% past the level before the best split
        f"  REGRESSION {CFG}: tokens/s over 13 runs (0001_c001 .. current): 979 up to 0007_c007, "
        "869 in the newest 3 (-11.2%; step at the split -9.2%), permutation p=0.00*; bound -5.0%",
        f"  REGRESSION {CFG}: step time over 13 runs (0001_c001 .. current): 0.5190 s up to 0006_c006, "
        "0.5890 s in the newest 3 (+13.5%; step at the split +10.2%), permutation p=0.00*; bound +5.0%",
        "  no change past a bound in 1 series",
        "gate: FAILED: no regression against the baseline in 1 configuration(s); * inconclusive; "
        "history of 1 configuration(s): 2 regression(s)",
    )


def test_gate_history_alone_from_results_folders_passes_a_steady_configuration(tmp_path: Path) -> None:
    hist = tmp_path / "history"
    rng = random.Random(8)
    for i in range(10):
        doc = run("zero2", 0.50 * math.exp(rng.gauss(0, 0.01)), 40.0, seed=i)
        doc["metadata"] = {**doc.get("metadata", {}), "started_at": f"2026-11-{i + 1:02d}T00:00:00"}
        write_run(hist / f"night-{i}", doc)
    cur = write_runs(tmp_path / "current", run("zero2", 0.50, 40.0, seed=50))
    proc = llmbench("gate", "--current", cur, "--history", hist)
    assert proc.returncode == 0, proc.stdout
    assert_lines(
        proc.stdout,
        "llmbench gate: no baseline (history only)",
        f"History ({hist}, up to 20 earlier runs per configuration):",
        "  no change past a bound in 3 series",
        "gate: passed: history of 1 configuration(s): 0 regression(s)",
    )


def test_gate_session_gates_against_the_saved_run_and_the_storage_history(tmp_path: Path) -> None:
    """What --llmbench-gate calls at session end: result files, the saved run resolved at start."""
    storage = tmp_path / ".benchmarks"
    saved_runs(storage / "Linux", [0.50] * 10, data=True)
    cur = write_run(tmp_path / "results", run("zero2", 0.60, 40.0, seed=40))
    baseline = check_gate_baseline("latest", storage)
    assert baseline.name == "0010_c010_2026.json"
    code, lines = gate_session([cur], baseline, parse_gate_bounds("history=9"), storage)
    assert code == 1
    assert lines[0] == f"baseline: {baseline}"
    assert_lines(lines[1], f"  REGRESSION {CFG}: tokens/s 1,024 -> 853 (-16.7%, 95% interval *", "History (*")


def test_a_history_too_short_for_a_spread_leaves_the_prior(tmp_path: Path) -> None:
    """Inside pytest (--llmbench-gate) the current side is this one session: the spread between
    sessions comes from the storage's earlier runs where 5 or more are there, else from the prior."""
    storage = tmp_path / ".benchmarks"
    saved_runs(storage / "Linux", [0.50] * 3, data=True)
    cur = write_run(tmp_path / "results", run("zero2", 0.60, 40.0, seed=40))
    baseline = check_gate_baseline("latest", storage)
    code, lines = gate_session([cur], baseline, parse_gate_bounds("alpha=0.01"), storage)
    assert code == 1
    assert_lines(
        lines[1],
        f"  REGRESSION {CFG}: step time *; t on session means, 1 vs 1 session(s), spread 1.5% between "
        "sessions (prior))",
    )
    proc = llmbench("gate", "--baseline", storage, "--current", cur, "--history", storage)
    assert_lines(proc.stdout, f"  REGRESSION {CFG}: step time *(prior))", "gate: FAILED: *")


# -- settings checked at session start --------------------------------------------------------


def test_gate_bounds_parse_into_settings() -> None:
    assert parse_gate_bounds(
        "tokens=3%, step_time=0.04,memory=10%,alpha=0.05,history=10,inconclusive=fail"
    ) == (
        GateBounds(
            tokens_drop=0.03,
            step_time_rise=0.04,
            memory_rise=0.10,
            alpha=0.05,
            history=10,
            fail_inconclusive=True,
        )
    )
    assert parse_gate_bounds("") == GateBounds()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("tokens=lots", "tokens: 'lots' is not a number; write 5% or 0.05"),
        ("memory=5", "memory: '5' reads as 500%; write 5% for 5 percent, or a fraction such as 0.05"),
        (
            "alpha=0",
            "alpha: '0' must be above 0 and at most 0.5; write a significance level such as 0.01 "
            "(the false-alarm rate the gate accepts)",
        ),
        (
            "history=3",
            "history: 3 earlier runs are too few for the change-point test at alpha 0.01 (it needs 9 or "
            "more); write 9 or more, or 0 for no history",
        ),
        ("inconclusive=maybe", "inconclusive: 'maybe' is neither fail nor pass; write inconclusive=fail"),
        (
            "noise=1",
            "noise=1: the noise allowance gave way to a significance test; drop noise= and set alpha= "
            "instead (default alpha=0.01: at most 1% false alarms)",
        ),
        (
            "speed=5%",
            "expected name=value pairs such as tokens=5%,step_time=5%,memory=5%,alpha=0.01 (names: "
            "alpha, history, inconclusive, memory, step_time, tokens); got 'speed=5%'",
        ),
    ],
)
def test_bad_gate_bounds_are_one_line_errors(raw: str, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_gate_bounds(raw)
    assert str(exc.value) == message


def test_gate_baseline_that_matches_no_saved_run_is_refused_before_anything_trains(tmp_path: Path) -> None:
    storage = tmp_path / ".benchmarks"
    saved_runs(storage / "Linux", [0.5, 0.5])
    with pytest.raises(
        ReportError, match=r"^no saved run in .* match 'nonexistent_run' \(newest there: 0001_c001"
    ):
        check_gate_baseline("nonexistent_run", storage)
    with pytest.raises(ReportError, match=r"^no pytest-benchmark storage at .*nowhere to find saved run '1'"):
        check_gate_baseline("1", tmp_path / "nowhere")
    (storage / "Linux" / "0003_other.json").write_text(json.dumps({"benchmarks": [{"name": "test_sort"}]}))
    with pytest.raises(
        ReportError, match=r"0003_other.json: a pytest-benchmark file with no llmbench benchmark"
    ):
        check_gate_baseline("3", storage)


def test_history_needs_more_runs_the_smaller_alpha_is() -> None:
    # the permutation test's smallest p-value with n runs is 2 / C(n, n // 2)
    assert [min_history(a) for a in (0.1, 0.05, 0.01, 0.001)] == [6, 7, 9, 13]
    assert parse_gate_bounds("alpha=0.05,history=7").history == 7
    with pytest.raises(SpecError, match=r"history: 7 earlier runs are too few .* at alpha 0.01"):
        parse_gate_bounds("history=7")


def test_run_spread_of_earlier_runs_ignores_a_step_and_a_drift() -> None:
    rng = random.Random(6)
    noise = [math.exp(rng.gauss(0, 0.01)) for _ in range(20)]
    flat = run_spread(noise).sd_log
    assert 0.005 < flat < 0.02
    stepped = [x * (1.3 if i >= 10 else 1) for i, x in enumerate(noise)]
    drifting = [1.02**i * x for i, x in enumerate(noise)]
    for series in (stepped, drifting):
        # the plain standard deviation takes the step or the drift for noise, 5 to 10 times over
        assert float(np.std(np.log(series), ddof=1)) > 5 * flat
        assert run_spread(series).sd_log < 1.5 * flat


def test_one_run_a_side_is_tested_against_the_spread_of_the_history(tmp_path: Path) -> None:
    store = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    rng = random.Random(9)
    saved_runs(store, [0.50 * math.exp(rng.gauss(0, 0.01)) for _ in range(10)])
    cur = write_runs(tmp_path / "current", run("zero2", 0.56, 40.0, seed=77))
    args = ["gate", "--baseline", tmp_path / ".benchmarks", "--current", cur]
    proc = llmbench(*args, "--history", tmp_path / ".benchmarks")
    assert proc.returncode == 1, proc.stdout
    # the runs' 1% spread, measured across ten sessions: +13% is far outside it
    assert_lines(
        proc.stdout,
        f"  REGRESSION {CFG}: step time * (+1*%, 95% interval +*, p<0.001; bound +5.0%; "
        "t on session means, 1 vs 1 session(s), spread *% between sessions (history and prior))",
        f"  {CFG}: * (spread *% between sessions, history: 10 earlier sessions; with the prior: *)",
    )


def test_a_repeats_summary_with_each_peak_tests_memory_with_runs_as_the_unit(tmp_path: Path) -> None:
    """What a pytest-benchmark saved run of --llmbench-repeat=3 carries once the summary keeps peaks."""
    summarised = run("zero2", 0.50, 40.0)
    summarised["repeats"] = {
        "count": 3,
        "mean_step_time_sec": [0.50, 0.505, 0.495],
        "mean_step_time_sec_mean": 0.50,
        "mean_step_time_sec_std": 0.005,
        "peak_memory_gb": [40.0, 40.1, 39.9],
    }
    cur = dict(summarised, repeats={**summarised["repeats"], "peak_memory_gb": [44.0, 44.1, 43.9]})
    result = run_gate(records_from_results([summarised]), records_from_results([cur]))
    (memory,) = [c for c in result.changes if c.metric == "peak memory"]
    assert memory.estimate is not None and memory.estimate.method == "Student t, 3 vs 3 runs"
    assert memory.verdict == REGRESSION
