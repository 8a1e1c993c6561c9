"""How sure the gate is about a change of peak memory, the history's change point, and the
Estimate every gate line prints: an interval and a p-value for a relative change, a verdict
against a bound.

Speed is not decided here: analysis/decision.py decides faster, tied or a regression from the
spread between sessions, and hands the gate an Estimate of its own. What stays here is what a
number that is the same at every step needs (peak memory: one figure a run, often deterministic),
and the history's change point.

Pure functions over plain numbers; numpy (the permutations) and scipy.special (t tails) are
imported where used, so the report package stays standard library at import.

Every comparison is on the log scale: a change is a ratio current / baseline, so its logarithm is
a difference of means, intervals of ratios stay positive, and tokens/s (tokens per step / step
time) gets the interval of step time turned over (Estimate.inverse).

What a side has decides the method for memory:

- **repeats** (two or more runs on a side): each run's peak is one observation; Student's t on the
  logs with equal counts, Welch's otherwise; one run against N repeats: the t interval for one
  more run from the N.
- **history spread** (one run a side, and earlier runs of the configuration): the two peaks' log
  difference against the spread across those earlier runs (robustly: successive differences, so a
  step or a slow drift in them does not count as spread).
- **exact**: both sides' runs agree to the last byte: the difference is the change, with nothing to
  test (p 0 when they differ, 1 when not).
- **bound only**: one peak a side: there is no sample to test, the change is compared with the
  bound and the output says so.

Verdicts (decide): REGRESSION when the change is significant at alpha AND its estimate is past the
bound (conbench's and Chromium's rule: a real change, and a large one); IMPROVED likewise the
other way; INCONCLUSIVE when the interval reaches past the bound but that does not hold; otherwise
ok. Under no change, P(REGRESSION) <= P(p < alpha) = alpha, whatever the bound.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .stats import t_quantile

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

OK, IMPROVED, INCONCLUSIVE, REGRESSION = "ok", "improved", "inconclusive", "REGRESSION"
REPEATS, HISTORY, EXACT, BOUND_ONLY = "repeats", "history spread", "exact", "bound only"

PERMUTATIONS = 1999
"""Permutations of the history test: the smallest p-value is 1 / 2000."""
SEED = 20_240_601
"""Permutations are seeded: the same input gives the same p-value, run after run."""
_EPS = 1e-12


@dataclass(frozen=True)
class RunSummary:
    """One side's runs on the log scale: how many, the mean and the spread of their log means."""

    n: int
    mean_log: float
    sd_log: float
    """Sample standard deviation of the runs' log means (0 for one run)."""

    @classmethod
    def of(cls, values: Sequence[float]) -> RunSummary:
        logs = [math.log(v) for v in values]
        sd = statistics.stdev(logs) if len(logs) > 1 else 0.0
        return cls(len(logs), statistics.fmean(logs), sd)


@dataclass(frozen=True)
class Estimate:
    """A relative change with its interval and p-value, and how they were computed."""

    base: float
    """The baseline's central value (mean step time, tokens/s, GB): what the change is against."""
    cur: float
    ratio: float
    """current / baseline."""
    low: float
    """Lower end of the interval of the ratio."""
    high: float
    p_value: float | None
    """Two-sided, against no change; None where nothing was tested (bound only)."""
    kind: str
    """REPEATS, HISTORY, EXACT or BOUND_ONLY; the speed decision's own kinds (sessions, history, prior)."""
    method: str
    """What was compared, for the reader: 'Student t, 3 vs 3 runs', 'block bootstrap, ...'."""
    confidence: float = 0.95
    run_sd: tuple[float, float] | None = None
    """Per-run standard deviation of the log mean (baseline, current): what a repeat would add.
    From repeats, or (steps) the within-run standard error, which understates run-to-run noise."""
    df: float | None = None
    """Degrees of freedom of the t-test (REPEATS)."""

    @property
    def change(self) -> float:
        return self.ratio - 1

    @property
    def interval(self) -> tuple[float, float]:
        """The interval of the relative change."""
        return self.low - 1, self.high - 1

    @property
    def tested(self) -> bool:
        return self.p_value is not None

    def inverse(self, base: float, cur: float) -> Estimate:
        """The same comparison for the reciprocal quantity (tokens/s from step time)."""
        return replace(self, base=base, cur=cur, ratio=1 / self.ratio, low=1 / self.high, high=1 / self.low)


def _t_sf(x: float, df: float) -> float:
    from scipy.special import stdtr  # scipy.stats.t.sf is stdtr(df, -x)

    return float(stdtr(df, -x))


def _t_estimate(
    base: RunSummary, cur: RunSummary, d: float, se: float, df: float, method: str, confidence: float
) -> Estimate:
    q = t_quantile(0.5 + confidence / 2, df)
    p = 2 * _t_sf(abs(d) / se, df)
    return Estimate(
        base=math.exp(base.mean_log),
        cur=math.exp(cur.mean_log),
        ratio=math.exp(d),
        low=math.exp(d - q * se),
        high=math.exp(d + q * se),
        p_value=min(1.0, p),
        kind=REPEATS,
        method=method,
        confidence=confidence,
        run_sd=(base.sd_log, cur.sd_log),
        df=df,
    )


def compare_runs(base: RunSummary, cur: RunSummary, confidence: float = 0.95) -> Estimate:
    """Runs as the unit (at least one side with two or more): see the module docstring."""
    if base.n < 2 and cur.n < 2:
        raise ValueError("compare_runs needs two or more runs on a side; use compare_steps")
    d = cur.mean_log - base.mean_log
    what = f"{base.n} vs {cur.n} runs"
    if base.sd_log <= _EPS and cur.sd_log <= _EPS:
        return exact(math.exp(base.mean_log), math.exp(cur.mean_log), f"exact, {what} all alike", confidence)
    if base.n == 1 or cur.n == 1:
        many = base if cur.n == 1 else cur
        # one more run from the repeated side's distribution: var = s^2 (1 + 1/n)
        se = many.sd_log * math.sqrt(1 + 1 / many.n)
        sd = (many.sd_log, many.sd_log)
        est = _t_estimate(base, cur, d, se, many.n - 1, f"t, {what} (spread from the repeats)", confidence)
        return replace(est, run_sd=sd)
    vb, vc = base.sd_log**2 / base.n, cur.sd_log**2 / cur.n
    se = math.sqrt(vb + vc)
    if base.n == cur.n:
        # pooled variance with equal counts: (s_b^2 + s_c^2) / 2 * 2 / n, the same se as Welch's
        return _t_estimate(base, cur, d, se, 2 * base.n - 2, f"Student t, {what}", confidence)
    df = (vb + vc) ** 2 / (vb**2 / (base.n - 1) + vc**2 / (cur.n - 1))
    return _t_estimate(base, cur, d, se, df, f"Welch t, {what}", confidence)


@dataclass(frozen=True)
class RunSpread:
    """Run-to-run spread of one configuration's metric, measured across its earlier runs."""

    sd_log: float
    """Standard deviation of one run's log value around the level of its time."""
    runs: int
    """How many earlier runs it was measured from."""


def run_spread(values: Sequence[float]) -> RunSpread:
    """The spread of single runs from a series of them, oldest first: the median absolute
    deviation of successive log differences (each difference holds two runs' noise, hence the
    sqrt 2), centred on their median so that a slow drift is not counted, and robust to one step."""
    y = [math.log(v) for v in values]
    if len(y) < 3:
        raise ValueError(f"a run-to-run spread needs at least 3 runs; got {len(y)}")
    d = [b - a for a, b in itertools.pairwise(y)]
    mid = statistics.median(d)
    mad = statistics.median(abs(x - mid) for x in d)
    return RunSpread(1.4826 * mad / math.sqrt(2), len(y))


def compare_with_spread(base: float, cur: float, spread: RunSpread, confidence: float = 0.95) -> Estimate:
    """One run a side against the spread of earlier runs (t with runs - 2 degrees of freedom: the
    median of differences costs one more than a mean would)."""
    what = f"t, 1 vs 1 run (spread of {spread.runs} earlier runs)"
    if spread.sd_log <= _EPS:
        return exact(base, cur, f"exact, {spread.runs} earlier runs all alike", confidence)
    one = RunSummary(1, 0.0, spread.sd_log)
    est = _t_estimate(
        RunSummary(1, math.log(base), 0.0),
        RunSummary(1, math.log(cur), 0.0),
        math.log(cur / base),
        spread.sd_log * math.sqrt(2),
        max(1, spread.runs - 2),
        what,
        confidence,
    )
    return replace(est, kind=HISTORY, run_sd=(one.sd_log, one.sd_log))


def exact(base: float, cur: float, method: str, confidence: float = 0.95) -> Estimate:
    """Both sides without spread: the change is known exactly."""
    ratio = cur / base
    return Estimate(base, cur, ratio, ratio, ratio, 1.0 if ratio == 1 else 0.0, EXACT, method, confidence)


def bound_only(base: float, cur: float, why: str, confidence: float = 0.95) -> Estimate:
    """Nothing to test: the point change alone, compared with the bound."""
    ratio = cur / base
    return Estimate(base, cur, ratio, ratio, ratio, None, BOUND_ONLY, f"bound only: {why}", confidence)


def _worse(est: Estimate, higher_is_worse: bool) -> tuple[float, float, float]:
    """The change and its interval, turned so that a positive number is worse."""
    lo, hi = est.interval
    if higher_is_worse:
        return est.change, lo, hi
    return -est.change, -hi, -lo


def decide(est: Estimate, bound: float, higher_is_worse: bool, alpha: float) -> str:
    """REGRESSION, IMPROVED, INCONCLUSIVE or OK; the rules are in the module docstring."""
    point, _, hi = _worse(est, higher_is_worse)
    if not est.tested:
        return REGRESSION if point > bound else IMPROVED if point < -bound else OK
    significant = est.p_value is not None and est.p_value < alpha
    if significant and point > bound:
        return REGRESSION
    if significant and point < -bound:
        return IMPROVED
    if hi > bound:
        return INCONCLUSIVE
    return OK


def repeats_to_settle(
    est: Estimate, bound: float, higher_is_worse: bool, alpha: float, most: int = 100
) -> int | None:
    """How many runs a side would turn an inconclusive change into a verdict, if the change and
    the per-run spread stayed as measured (Student t with n runs a side); None when no count up to
    `most` does, or nothing measured a spread."""
    if est.run_sd is None or est.kind not in (REPEATS, HISTORY):
        return None
    var = est.run_sd[0] ** 2 + est.run_sd[1] ** 2
    if var <= 0:
        return None
    d = math.log(est.ratio)
    base = RunSummary(1, 0.0, 0.0)
    for n in range(2, most + 1):
        se = math.sqrt(var / n)
        trial = _t_estimate(base, base, d, se, 2 * n - 2, "", est.confidence)
        if decide(trial, bound, higher_is_worse, alpha) != INCONCLUSIVE:
            return n
    return None


@dataclass(frozen=True)
class ChangePoint:
    """The best split of a series of runs (oldest first) into a before and an after level."""

    n: int
    """How many runs the series has."""
    split: int
    """Runs before the change: values[:split] are before it, values[split:] after."""
    before: float
    """Geometric mean before the change."""
    after: float
    """Geometric mean after it."""
    newest: float
    """Geometric mean of the newest runs (the last three, or fewer when the change is newer)."""
    newest_runs: int
    """How many runs `newest` is the mean of."""
    p_value: float
    """Permutation p-value of the largest split statistic: how often shuffled runs split as well."""

    @property
    def step(self) -> float:
        """after / before - 1."""
        return self.after / self.before - 1

    @property
    def change(self) -> float:
        """newest / before - 1: how far the series now is from where it was before the change.
        Under a slow drift this is most of the drift across the window, not half of it."""
        return self.newest / self.before - 1


def _split_statistics(y: np.ndarray, min_before: int) -> np.ndarray:
    """|mean after - mean before| / pooled standard error, for every split of every row of y."""
    import numpy as np

    n = y.shape[1]
    cs, cs2 = np.cumsum(y, axis=1), np.cumsum(y * y, axis=1)
    total, total2 = cs[:, -1:], cs2[:, -1:]
    k = np.arange(min_before, n)  # runs before the split; at least one after it
    left, left2 = cs[:, k - 1], cs2[:, k - 1]
    m_left, m_right = left / k, (total - left) / (n - k)
    ss = (left2 - k * m_left**2) + ((total2 - left2) - (n - k) * m_right**2)
    pooled = np.maximum(ss, 0) / (n - 2)
    # a floor for series without any spread (a deterministic peak): a step is then infinitely sure
    se = np.sqrt(np.maximum(pooled, _EPS) * (1 / k + 1 / (n - k)))
    return np.abs(m_right - m_left) / se


def change_point(
    values: Sequence[float], min_before: int = 2, permutations: int = PERMUTATIONS, newest: int = 3
) -> ChangePoint:
    """The most likely single change in the level of a series of runs, and how sure it is.

    The statistic of a split is the two-sample t of the log values before and after it; the
    best split is the largest, and its p-value comes from shuffling the runs (what E-Divisive
    does with its energy statistic; with only the level to watch, t has more power). At least
    `min_before` runs before the split (one outlier among the oldest runs is not a change of the
    code now); the newest run alone may be the after side, a step that just happened."""
    import numpy as np

    y = np.log(np.asarray(values, dtype=float))
    n = len(y)
    if n < min_before + 2:
        raise ValueError(f"a change point needs at least {min_before + 2} runs; got {n}")
    rng = np.random.default_rng(SEED)
    rows = np.vstack([y, np.array([rng.permutation(y) for _ in range(permutations)])])
    stats = _split_statistics(rows, min_before)
    observed = stats[0]
    best = int(np.argmax(observed))
    split = min_before + best
    top = stats.max(axis=1)
    p = (1 + int((top[1:] >= top[0] * (1 - 1e-9)).sum())) / (permutations + 1)
    tail = y[max(split, n - newest) :]
    return ChangePoint(
        n=n,
        split=split,
        before=math.exp(float(y[:split].mean())),
        after=math.exp(float(y[split:].mean())),
        newest=math.exp(float(tail.mean())),
        newest_runs=len(tail),
        p_value=p,
    )
