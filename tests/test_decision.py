"""The speed decision (analysis/decision.py): faster, tied or a regression from the spread between
sessions, each rule with a case that fails if the rule is wrong. Pure functions, seeded simulation.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import sys
from pathlib import Path

import pytest

from llmbench_pytest.analysis.decision import (
    FASTER,
    HISTORY,
    PRIOR,
    SESSIONS,
    SLOWER,
    TIED,
    Side,
    Spread,
    decide,
    history_spread,
    power,
    session_spread,
    sessions_for_power,
    with_prior,
)
from llmbench_pytest.analysis.decision_prior import PRIOR_FILE, PRIOR_WEIGHT, Prior, prior_for
from llmbench_pytest.analysis.significance import IMPROVED, INCONCLUSIVE, OK, REGRESSION

REPO = Path(__file__).resolve().parents[1]
GATE = {"bound": 0.05, "alpha": 0.01}


def prior(sd: float, df: int = 30) -> Prior:
    return Prior("NVIDIA H100 80GB HBM3", "causal_lm", "zero3", sd, df, df + 5, "zero3 on a test host")


def sessions(rng: random.Random, level: float, sd: float, k: int) -> Side:
    return Side(tuple(level * math.exp(rng.gauss(0, sd)) for _ in range(k)))


def test_identical_sides_are_tied_and_no_count_of_sessions_tells_them_apart() -> None:
    spread = with_prior(None, prior(0.02))
    d = decide(Side((0.5,)), Side((0.5,)), spread)
    assert d.verdict == TIED and d.p_value == pytest.approx(1.0) and d.settle is None
    assert d.low is not None and d.high is not None and d.low < 1 < d.high


def test_without_any_measure_of_the_spread_there_is_no_winner_and_no_regression() -> None:
    for kw in ({}, GATE):
        d = decide(Side((0.5,)), Side((1.0,)), None, **kw)
        assert d.verdict == INCONCLUSIVE and not d.tested and d.low is None
        assert d.method == "not tested: 1 vs 1 session(s), nothing measured the spread between sessions"
    assert sessions_for_power(0.10, None, 0.05, 0.01) is None


def test_the_sides_own_sessions_measure_the_spread_pooled_around_each_side() -> None:
    a, b = Side((1.0, 1.1)), Side((2.0, 2.2, 1.8))
    s = session_spread(a, b)
    assert s is not None and s.kind == SESSIONS and s.df == 3
    logs_a, logs_b = [math.log(x) for x in a.sessions], [math.log(x) for x in b.sessions]
    ss = sum((y - statistics.fmean(logs_a)) ** 2 for y in logs_a) + sum(
        (y - statistics.fmean(logs_b)) ** 2 for y in logs_b
    )
    assert s.sd == pytest.approx(math.sqrt(ss / 3))
    assert session_spread(Side((1.0,)), Side((2.0,))) is None


def test_a_prior_counts_for_at_most_its_weight_and_is_combined_with_what_was_measured() -> None:
    alone = with_prior(None, prior(0.04, df=100))
    assert alone is not None and alone.kind == PRIOR and alone.df == PRIOR_WEIGHT and alone.sd == 0.04
    measured = Spread(0.01, 6, SESSIONS, "measured")
    both = with_prior(measured, prior(0.04))
    assert both is not None and both.kind == SESSIONS and both.prior and both.df == 6 + PRIOR_WEIGHT
    assert both.sd == pytest.approx(math.sqrt((PRIOR_WEIGHT * 0.04**2 + 6 * 0.01**2) / (6 + PRIOR_WEIGHT)))
    assert both.words() == f"spread {both.sd:.1%} between sessions (measured and prior)"
    # one host's history against a side from another host: at least the prior, which holds hosts
    history = Spread(0.01, 8, HISTORY, "history: 10 earlier sessions")
    raised = with_prior(history, prior(0.04), cross_host=True)
    assert raised is not None and raised.sd == 0.04 and "raised to the prior between hosts" in raised.source


def test_history_spread_counts_an_outlier_and_little_of_a_drift() -> None:
    values = [1.0, 1.01, 0.99, 1.0, 1.02]
    s = history_spread(values)
    y = [math.log(v) for v in values]
    assert s is not None and s.df == 3
    assert s.sd == pytest.approx(math.sqrt(sum((b - a) ** 2 for a, b in itertools.pairwise(y)) / 8))
    drift = history_spread([1.01**i for i in range(10)])
    assert drift is not None and drift.sd < 0.01  # 1% a session: 0.7%, not the 3% spread of the levels
    outlier = history_spread([1.0, 1.0, 1.3, 1.0, 1.0])
    assert outlier is not None and outlier.sd > 0.1
    assert history_spread([1.0, 1.1]) is None


def test_ranking_verdicts_faster_slower_tied() -> None:
    spread = with_prior(Spread(0.01, 8, SESSIONS, "measured"), None)
    assert decide(Side((1.0, 1.01)), Side((0.8, 0.81)), spread).verdict == FASTER
    assert decide(Side((0.8, 0.81)), Side((1.0, 1.01)), spread).verdict == SLOWER
    assert decide(Side((1.0, 1.01)), Side((1.005, 1.0)), spread).verdict == TIED


def test_gate_verdicts_against_the_bound() -> None:
    s = Spread(0.01, 20, SESSIONS, "measured")
    one = Side((1.0,))
    assert decide(one, Side((1.20,)), s, **GATE).verdict == REGRESSION
    assert decide(one, Side((0.80,)), s, **GATE).verdict == IMPROVED
    four = Side((1.0,) * 4)
    assert decide(four, Side((1.02,) * 4), s, **GATE).verdict == OK  # significant, but inside the bound
    wide = Spread(0.05, 20, SESSIONS, "measured")
    d = decide(one, Side((1.06,)), wide, **GATE)
    assert d.verdict == INCONCLUSIVE and d.settle is not None
    # with `settle` sessions a side and the same spread the verdict is reached; with one fewer, not
    k = d.settle
    more = [
        decide(Side((1.0,) * n), Side((1.06,) * n), Spread(0.05, 20 + 2 * (n - 1), SESSIONS, "m"), **GATE)
        for n in (k - 1, k)
    ]
    assert [x.verdict for x in more] == [INCONCLUSIVE, REGRESSION]


def test_a_sessions_own_noise_is_the_floor_and_the_method_says_so() -> None:
    s = Spread(0.01, 20, SESSIONS, "measured")
    d = decide(Side((1.0,), floor=0.05), Side((1.12,)), s, **GATE)
    assert d.verdict == INCONCLUSIVE and d.floor == 0.05
    assert d.method.endswith(
        "spread 1.0% between sessions (measured), 5.0% inside one session (larger, used)"
    )


def test_false_alarms_stay_within_alpha_and_the_recommended_sessions_catch_ten_percent() -> None:
    """2,000 simulated A/A gate runs and rankings with the true spread 3% and a prior that says so;
    then A/B at the sessions a side the gate recommends: caught 95% of the time (the noncentral t)."""
    rng = random.Random(58)
    sd = 0.03
    spread = with_prior(None, prior(sd))
    trials = 2000
    alarms = winners = 0
    for _ in range(trials):
        a, b = sessions(rng, 1.0, sd, 1), sessions(rng, 1.0, sd, 1)
        alarms += decide(a, b, spread, **GATE).verdict == REGRESSION
        winners += decide(a, b, spread).verdict != TIED
    assert alarms / trials <= 0.01
    assert winners / trials <= 0.05
    k = sessions_for_power(0.10, spread, 0.05, 0.01)
    assert k is not None and 1 < k < 20
    assert power(k, 0.10, spread, 0.05, 0.01) >= 0.95 > power(k - 1, 0.10, spread, 0.05, 0.01)
    caught = 0
    for _ in range(trials):
        a, b = sessions(rng, 1.0, sd, k), sessions(rng, 1.1, sd, k)
        both = with_prior(session_spread(a, b), prior(sd))
        caught += decide(a, b, both, **GATE).verdict == REGRESSION
    assert caught / trials >= 0.93  # 0.95 up to the simulation's own noise (sd 0.5%)


def test_prior_for_takes_the_most_specific_entry_and_says_where_it_came_from(tmp_path: Path) -> None:
    rows = [
        {"device": "GPU", "workload": "causal_lm", "strategy": "zero3", "sd_log": 0.09},
        {"device": "NVIDIA H200", "workload": "causal_lm", "strategy": "*", "sd_log": 0.05},
        {"device": "GPU", "workload": "*", "strategy": "*", "sd_log": 0.08},
        {"device": "CPU", "workload": "*", "strategy": "*", "sd_log": 0.2},
    ]
    for r in rows:
        r |= {"df": 10, "sessions": 12, "groups": 2}
    path = tmp_path / "spread.json"
    path.write_text(json.dumps({"sources": ["docs/results"], "date": "2026-11-28", "spreads": rows}))
    found = prior_for("NVIDIA H200", "causal_lm", "zero3", path=path)
    assert found is not None and found.sd_log == 0.09
    assert (
        found.source
        == "zero3, causal_lm, on every GPU measured: 12 sessions in 2 groups (docs/results, 2026-11-28)"
    )
    assert prior_for("NVIDIA H200", "causal_lm", "ddp", path=path).sd_log == 0.05  # type: ignore[union-attr]
    assert prior_for("NVIDIA A100", "lora", "ddp", path=path).sd_log == 0.08  # type: ignore[union-attr]
    assert prior_for("CPU", "causal_lm", "ddp", path=path).sd_log == 0.2  # type: ignore[union-attr]
    # a GPU's spread says nothing of a CPU, nor the other way
    assert prior_for("CPU", "x", "y", path=tmp_path / "missing.json") is None


def test_a_prior_speaks_only_for_the_models_it_was_measured_on(tmp_path: Path) -> None:
    # on one H200 llama-125m moved 9.6% between sessions where llama-1b's ddp, the H200 prior, moves
    # 0.5%: another model's comparison has no prior (docs/results/2026-11-28-h200-gate-error-rates)
    rows = [{"device": "NVIDIA H200", "workload": "causal_lm", "strategy": "ddp", "sd_log": 0.005}]
    rows[0] |= {"df": 8, "sessions": 13, "groups": 5}
    shapes = {
        "NVIDIA H200": [["causal_lm", "llama-1b", 2048, 8]],
        "GPU": [["causal_lm", "llama-1b", 2048, 8]],
    }
    path = tmp_path / "spread.json"
    path.write_text(json.dumps({"sources": ["docs/results"], "shapes": shapes, "spreads": rows}))
    assert prior_for("NVIDIA H200", "causal_lm", "ddp", "llama-1b", path).sd_log == 0.005  # type: ignore[union-attr]
    assert prior_for("NVIDIA H100 80GB HBM3", "causal_lm", "ddp", "llama-1b", path) is None  # no H100 entry
    assert prior_for("NVIDIA H200", "causal_lm", "ddp", "llama-125m", path) is None
    assert prior_for("NVIDIA H200", "lora", "ddp", "llama-1b", path) is None
    # a file from before the shapes were recorded restricts nothing
    older = tmp_path / "older.json"
    older.write_text(json.dumps({"sources": ["docs/results"], "spreads": rows}))
    assert prior_for("NVIDIA H200", "causal_lm", "ddp", "llama-125m", older).sd_log == 0.005  # type: ignore[union-attr]


def test_the_shipped_spreads_are_what_the_tool_computes_from_the_saved_results() -> None:
    """decision_spread.json is written by tools/session_spread.py from docs/results, never by hand."""
    sys.path.insert(0, str(REPO / "tools"))
    from session_spread import MIN_DF, pooled, sessions_by_level, shapes

    doc = json.loads(PRIOR_FILE.read_text())
    levels = sessions_by_level([REPO / s for s in doc["sources"]])
    rows = [r for r in pooled(levels) if r["df"] >= MIN_DF]
    assert rows == doc["spreads"]
    assert shapes(levels) == doc["shapes"]


def test_a_run_with_a_fault_injected_is_not_counted_as_the_noise_between_sessions() -> None:
    """A B session of tools/gate_error_rates.py (ddp slowed by 10%) beside the A sessions of the
    same commit would count the injected slowdown as noise: its result.json names the fault and
    tools/session_spread.py leaves it out."""
    sys.path.insert(0, str(REPO / "tools"))
    from session_spread import level

    healthy = {
        "strategy": "ddp",
        "world_size": 1,
        "model": "llama-1b",
        "seq_len": 2048,
        "per_device_batch": 8,
        "workload": "causal_lm",
        "device": "cuda",
        "gpu_name": "NVIDIA H200",
        "status": "ok",
        "mean_step_time_sec": 0.29,
        "injected_fault": None,
        "metadata": {"session": "s1", "git_commit": "abc"},
    }
    assert level(healthy) is not None
    assert level({**healthy, "injected_fault": "ddp:slow=0.028757"}) is None
