"""How sure the gate is: an interval and a p-value for a relative change, a verdict against a
bound, and a change point in a configuration's history of runs.

Pure functions over plain numbers. numpy (the resampling) and scipy.special (t quantiles and
tails) are imported where used: the report package imports this module and stays standard library
at import (tests/test_report.py holds it to that; `llmbench report` and `llmbench compare` load
them only when they test whether two results are tied on speed, report/ranking.py). The gate
(report/gate/run.py) decides what to feed these functions; nothing here reads a file.

Every comparison is on the log scale: a change is a ratio current / baseline, so its logarithm is
a difference of means, intervals of ratios stay positive, and tokens/s (tokens per step / step
time) gets the interval of step time turned over (Estimate.inverse).

What a side has decides the method:

- **repeats** (two or more runs on a side): each run's mean is one observation, since run-to-run
  variation (another process on the host, clocks, allocator state) is larger than the jitter of
  steps inside a run. Student's t on the log means when both sides have as many runs (with equal
  counts it stays close to its nominal level when the variances differ, and at 3 runs a side its
  4 degrees of freedom against Welch's 2 to 4 are the difference between catching a 10%
  slowdown and not); Welch's t when the counts differ; one run against N repeats: the t
  interval for one more run from the N (run-to-run spread from the side that measured it).
- **history spread** (one run a side, and earlier runs of the configuration): the two runs'
  log difference against the run-to-run spread measured across those earlier runs (robustly:
  successive differences, so a step or a slow drift in them does not count as spread), a t-test
  with that spread. Earlier runs from separate sessions hold the noise between sessions, which
  nothing inside one run or one session can measure.
- **steps** (one run a side, no history): a circular block bootstrap of each side's mean step time (Politis
  and Romano 1992), blocks as long as Politis and White's automatic rule picks (2004; corrected
  by Patton, Politis and White 2009), because consecutive steps are correlated (a slow phase of
  the host lasts several steps) and an iid bootstrap or a t-test on steps is then far too sure.
  This measures step-to-step noise only, not run-to-run: the output says so.
- **exact**: both sides' runs agree to the last byte (peak memory is often deterministic): the
  difference is the change, with nothing to test (p 0 when they differ, 1 when not).
- **bound only**: one number a side (peak memory of single runs) or no samples saved: there is
  no sample to test, the change is compared with the bound and the output says so.

Verdicts (decide): REGRESSION when the change is significant at alpha AND its estimate is past the
bound (conbench's and Chromium's rule: a real change, and a large one); IMPROVED likewise the
other way; INCONCLUSIVE when the interval reaches past the bound but that does not hold (too
noisy to tell, or a significant change whose size might be past the bound); otherwise ok. Under
no change, P(REGRESSION) <= P(p < alpha) = alpha, whatever the bound. (Asking the whole interval
to clear the bound as well halves the power at a 10% slowdown with 3 runs a side and 2%
run-to-run noise, for no fewer false alarms.)
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
REPEATS, HISTORY, STEPS, EXACT, BOUND_ONLY = "repeats", "history spread", "steps", "exact", "bound only"

MIN_STEPS = 8
"""Fewer measured steps than this on a side: no bootstrap (its interval would be a guess)."""
RESAMPLES = 4000
"""Bootstrap resamples: the smallest p-value is 2 / 4001 = 0.0005, well under alpha 0.01."""
PERMUTATIONS = 1999
"""Permutations of the history test: the smallest p-value is 1 / 2000."""
SEED = 20_240_601
"""Resampling is seeded: the same input gives the same interval, run after run."""
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

    @classmethod
    def from_moments(cls, n: int, mean: float, std: float) -> RunSummary:
        """From a mean and standard deviation of the runs' means (a `repeats` summary without the
        values): on the log scale the spread is std / mean to first order (the delta method)."""
        return cls(n, math.log(mean), std / mean)


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
    """REPEATS, STEPS, EXACT or BOUND_ONLY."""
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


def _t_quantile(q: float, df: float) -> float:
    # scipy.special's inverse t (what scipy.stats.t.ppf calls), through stats.t_quantile: the
    # report and `llmbench compare` call this for every tie they test (report/ranking.py), and
    # importing scipy.stats would add about 0.45 s to each command (2-core VM, 2026-11-27)
    return t_quantile(q, df)


def _t_sf(x: float, df: float) -> float:
    from scipy.special import stdtr  # scipy.stats.t.sf is stdtr(df, -x)

    return float(stdtr(df, -x))


def _t_estimate(
    base: RunSummary, cur: RunSummary, d: float, se: float, df: float, method: str, confidence: float
) -> Estimate:
    q = _t_quantile(0.5 + confidence / 2, df)
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


def block_length_estimate(x: Sequence[float]) -> float:
    """Politis and White's (2004) estimate of the block length that minimises the mean squared
    error of the circular block bootstrap's variance of a mean, with Patton, Politis and White's
    2009 correction; a real number, at most ceil(min(3 sqrt(n), n / 3)). It is, series by series,
    arch's optimal_block_length(x)['circular']: tests/test_gate_stats.py holds it to that reference.

    R(k) is the autocovariance at lag k (the sum over the n - k pairs, divided by n).

    1. The window M: m is the first lag (m >= 1) from which K = max(5, ceil(sqrt(log10 n))) lags
       in a row have an autocorrelation inside +-2 sqrt(log10(n) / n), looking at lags up to
       L = ceil(sqrt(n)) + K (and n - 2); M = min(2 m, L), or L where no such run exists. The
       autocorrelation here is the lag's sum of products over the root of the sums of squares of
       x[k+1:] and x[:n-k-1] (arch's convention): close to the correlation of the pairs, where
       R(k) / R(0) shrinks by (n - k) / n and, with few steps, calls real correlation noise.
    2. With the flat-top window w(t) = min(1, 2 (1 - |t|)), over k = -M .. M: G = sum |k| w(k/M) R(k)
       and the long-run variance sigma^2 = sum w(k/M) R(k); the estimate is (2 G^2 / D)^(1/3) n^(1/3)
       with D = 4/3 sigma^4 (the corrected constant of the circular bootstrap). A flat-top window's
       sigma^2 can come out 0 or below: it is squared all the same (at exactly 0, the cap).
    """
    import numpy as np

    v = np.asarray(x, dtype=float)
    n = len(v)
    if n < 4:
        return 1.0
    c = v - v.mean()
    if not np.any(c):
        return 1.0
    cap = math.ceil(min(3 * math.sqrt(n), n / 3))
    k_run = max(5, math.ceil(math.sqrt(math.log10(n))))
    most = min(math.ceil(math.sqrt(n)) + k_run, n - 2)  # both sides of a lag keep a step
    lags = np.arange(most + 1)
    products = np.array([float(c[: n - k] @ c[k:]) for k in lags])
    squares = np.cumsum(c * c)  # squares[i]: sum of c[:i + 1]**2
    head = squares[n - lags - 2]  # sum of c[: n - k - 1]**2
    tail = squares[-1] - squares[lags]  # sum of c[k + 1 :]**2
    scale = np.sqrt(head * tail)
    corr = np.divide(np.abs(products), scale, out=np.zeros(most + 1), where=scale > 0)
    inside = corr < 2 * math.sqrt(math.log10(n) / n)
    first = next((m for m in range(1, most - k_run + 2) if inside[m : m + k_run].all()), None)
    window = most if first is None else min(2 * first, most)
    k = np.arange(1, window + 1)
    w = np.minimum(1.0, 2 * (1 - k / window))
    acov = products[1 : window + 1] / n
    sigma2 = products[0] / n + 2 * float(w @ acov)
    g = 2 * float(w @ (k * acov))
    if sigma2 == 0:
        return float(cap)
    return min((2 * g**2 / (4 / 3 * sigma2**2)) ** (1 / 3) * n ** (1 / 3), cap)


def block_length(x: Sequence[float]) -> int:
    """The block length of x's circular block bootstrap: block_length_estimate to the nearest whole
    step (halves up), at least 1 (below 1.5, the iid bootstrap)."""
    return max(1, math.floor(block_length_estimate(x) + 0.5))


def bootstrap_means(x: Sequence[float], block: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of circular block bootstrap resamples of x: round(n / block) blocks drawn with
    replacement from the n blocks that start at each step (wrapping around the end)."""
    import numpy as np

    v = np.asarray(x, dtype=float)
    n = len(v)
    block = max(1, min(block, n))
    k = max(1, round(n / block))
    wrapped = np.concatenate([v, v[: block - 1]])
    sums = np.convolve(wrapped, np.ones(block), mode="valid")[:n]  # sum of the block starting at i
    starts = rng.integers(0, n, size=(resamples, k))
    return sums[starts].sum(axis=1) / (k * block)


def compare_steps(
    base: Sequence[float],
    cur: Sequence[float],
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    block: int | None = None,
) -> Estimate:
    """One run a side: the change of the mean step time from each run's per-step times, by a
    circular block bootstrap (block=None: each side's automatic length; block=1: iid)."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    lb = block or block_length(base)
    lc = block or block_length(cur)
    mb, mc = float(np.mean(base)), float(np.mean(cur))
    boot_b = bootstrap_means(base, lb, resamples, rng)
    boot_c = bootstrap_means(cur, lc, resamples, rng)
    d = np.log(boot_c) - np.log(boot_b)
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(d, [tail, 1 - tail])
    # percentile p-value: consistent with the interval (0 outside the 95% interval <=> p < 0.05)
    below, above = int((d <= 0).sum()), int((d >= 0).sum())
    p = min(1.0, 2 * (min(below, above) + 1) / (resamples + 1))
    blocks = f"block {lb}" if lb == lc else f"blocks {lb}/{lc}"
    return Estimate(
        base=mb,
        cur=mc,
        ratio=mc / mb,
        low=math.exp(lo),
        high=math.exp(hi),
        p_value=p,
        kind=STEPS,
        method=f"block bootstrap, {len(base)} vs {len(cur)} steps, {blocks}",
        confidence=confidence,
        run_sd=(float(np.std(np.log(boot_b))), float(np.std(np.log(boot_c)))),
    )


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
    if est.run_sd is None or est.kind not in (REPEATS, HISTORY, STEPS):
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
