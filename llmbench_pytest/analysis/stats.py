"""Statistics of step times and of runs: the one place means, spreads and intervals are computed.

Standard library at import (the plugin imports it at start-up); t_quantile imports scipy.special
at its first call.

- Over runs (repeats, configurations): `mean_of`, `spread_of`, `relative_spread`.
- Within one run: `StepStats` (mean, median, extremes, CV), `Jitter` (robust: median, MAD, IQR,
  p95/p50, outliers with their positions) and `mean_interval`, the 95% confidence interval of
  the mean step time. Steps of one run are correlated (a slow step is often followed by another:
  ZeRO-3's gathers, an allocator flush), so the interval uses an effective sample size from the
  lag-1 autocorrelation rather than the step count, and clips outliers first so that one stall
  neither hides nor dominates how well the mean is known.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

# ---------------------------------------------------------------- over runs


def _present(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None]


def mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are present; None when none is."""
    xs = _present(values)
    return statistics.fmean(xs) if xs else None


def spread_of(values: Iterable[float | None]) -> float | None:
    """Sample standard deviation (n-1) of the values present; None with fewer than two."""
    xs = _present(values)
    return statistics.stdev(xs) if len(xs) > 1 else None


def relative_spread(values: Iterable[float | None]) -> float | None:
    """Standard deviation over mean of the values present; None with fewer than two or mean 0."""
    xs = _present(values)
    std = spread_of(xs)
    mean = statistics.fmean(xs) if xs else 0.0
    return std / mean if std is not None and mean else None


# ---------------------------------------------------------------- within a run


@dataclass(frozen=True, slots=True)
class StepStats:
    mean: float
    median: float
    min: float
    max: float
    std: float
    """Sample standard deviation (n-1); 0 for a single step."""
    cv: float
    """Coefficient of variation, std / mean."""

    @classmethod
    def of(cls, times: list[float]) -> StepStats:
        if not times:
            nan = math.nan
            return cls(nan, nan, nan, nan, nan, nan)
        mean = statistics.fmean(times)
        std = statistics.stdev(times) if len(times) > 1 else 0.0
        return cls(
            mean=mean,
            median=statistics.median(times),
            min=min(times),
            max=max(times),
            std=std,
            cv=std / mean if mean > 0 else math.nan,
        )


def third_means(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the last third (at least one value each) of a series."""
    if not values:
        return math.nan, math.nan
    k = max(1, len(values) // 3)
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


MAD_TO_SIGMA = 1.4826
"""MAD x 1.4826 estimates the standard deviation of normal data."""
OUTLIER_MADS = 5.0
"""A step further than 5 robust standard deviations from the median is an outlier: about one in
1.7 million for normal noise, so what is flagged is a stall, not jitter."""


def _quantile(sorted_xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Jitter:
    """Robust summary of one run's step times: what a reader needs to see how steady it was."""

    median: float
    mad: float
    """Median absolute deviation from the median (unscaled)."""
    iqr: float
    p50: float
    p95: float
    p95_over_p50: float
    outliers: tuple[int, ...]
    """0-based positions of steps beyond OUTLIER_MADS robust standard deviations of the median."""
    outlier_limit: tuple[float, float]
    """(low, high) seconds beyond which a step is an outlier."""

    @classmethod
    def of(cls, times: list[float]) -> Jitter | None:
        if not times:
            return None
        xs = sorted(times)
        median = statistics.median(xs)
        mad = statistics.median(abs(x - median) for x in xs)
        width = OUTLIER_MADS * MAD_TO_SIGMA * mad
        low, high = median - width, median + width
        outliers = tuple(i for i, t in enumerate(times) if mad > 0 and not low <= t <= high)
        p50, p95 = _quantile(xs, 0.5), _quantile(xs, 0.95)
        return cls(
            median=median,
            mad=mad,
            iqr=_quantile(xs, 0.75) - _quantile(xs, 0.25),
            p50=p50,
            p95=p95,
            p95_over_p50=p95 / p50 if p50 > 0 else math.nan,
            outliers=outliers,
            outlier_limit=(low, high),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["outliers"] = list(self.outliers)
        out["outlier_limit"] = list(self.outlier_limit)
        return out


@functools.cache
def _inverse_t() -> Callable[[float, float], float]:
    from scipy.special import stdtrit

    return stdtrit


def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile, exact at any degrees of freedom above 0, whole or not.

    mean_interval asks for it at n_eff - 1, a real number, which lies between 1 and 2 for a run of
    few effective steps: there the quantile changes fastest (12.71 at 1, 6.02 at 1.5 and 4.30 at 2
    degrees of freedom, for p = 0.975). The inverse of the t distribution is scipy's
    (scipy.special.stdtrit, what scipy.stats.t.ppf calls), imported at the first call and kept:
    the plugin imports this module at start-up, and adaptive measurement asks for a quantile at
    every check point inside the measured window. scipy.stats would cost over a second to import
    and some 100 us a call; scipy.special costs about 0.1 s once (numpy and torch already loaded,
    as in a worker) and a few us a call."""
    if not 0 < p < 1:
        raise ValueError(f"a t quantile needs 0 < p < 1; got {p}")
    if not dof > 0:
        raise ValueError(f"a t quantile needs degrees of freedom above 0; got {dof}")
    return float(_inverse_t()(dof, p))


def cv_lower_limit(cv: float, n: int, confidence: float = 0.95) -> float:
    """The one-sided lower confidence limit of the true coefficient of variation behind `cv`
    measured over `n` values (normal values: (n-1) s^2 / sigma^2 is chi-square with n - 1 degrees
    of freedom): the spread the data show beyond doubt. From 5 values it is 0.65 of the measured
    CV at 95%, from 3 values 0.58: a CV a little above a bound is what a spread within it often
    shows."""
    if n < 2:
        raise ValueError(f"a spread needs at least 2 values; got {n}")
    from scipy.special import chdtri  # the inverse survival function: P(X > x) = 1 - confidence

    return cv * math.sqrt((n - 1) / float(chdtri(n - 1, 1 - confidence)))


@dataclass(frozen=True, slots=True)
class MeanInterval:
    """A confidence interval of one run's mean step time."""

    mean: float
    half_width: float
    """Seconds either side of the mean."""
    relative: float
    """half_width / mean: 0.01 means the mean is known to +-1%."""
    confidence: float
    steps: int
    effective_steps: float
    """Steps after allowing for their correlation (n (1 - r1) / (1 + r1), r1 >= 0)."""
    lag1_autocorrelation: float
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def steps_for(self, relative: float) -> int:
        """About how many steps at this spread would know the mean to +-`relative`: the
        half-width shrinks as one over the square root of the steps."""
        return max(self.steps, math.ceil(self.steps * (self.relative / relative) ** 2))


def _lag1(xs: list[float], mean: float) -> float:
    den = sum((x - mean) ** 2 for x in xs)
    if den <= 0:
        return 0.0
    return sum((a - mean) * (b - mean) for a, b in itertools.pairwise(xs)) / den


def mean_interval(times: list[float], confidence: float = 0.95) -> MeanInterval | None:
    """The interval of the mean step time, allowing for correlated steps and robust to outliers.

    Outliers (Jitter's limits) are clipped to the limit before the spread is taken: a single
    stall moves the mean it belongs to, but cannot make a steady run look unmeasurable. Positive
    lag-1 autocorrelation r1 shrinks the sample to n (1 - r1) / (1 + r1) effective steps (the
    AR(1) variance of a mean); negative r1 is taken as 0, which only widens the interval."""
    n = len(times)
    if n < 2:
        return None
    mean = statistics.fmean(times)
    jitter = Jitter.of(times)
    assert jitter is not None
    low, high = jitter.outlier_limit
    clipped = [min(max(t, low), high) for t in times] if jitter.mad > 0 else list(times)
    center = statistics.fmean(clipped)
    r1 = min(max(_lag1(clipped, center), 0.0), 0.95) if n >= 4 else 0.0
    n_eff = max(2.0, n * (1 - r1) / (1 + r1))
    se = statistics.stdev(clipped) / math.sqrt(n_eff)
    half = t_quantile(0.5 + confidence / 2, n_eff - 1) * se
    return MeanInterval(
        mean=mean,
        half_width=half,
        relative=half / mean if mean > 0 else math.inf,
        confidence=confidence,
        steps=n,
        effective_steps=n_eff,
        lag1_autocorrelation=r1,
        method=f"t interval on {n_eff:.1f} effective steps (lag-1 autocorrelation {r1:.2f}), "
        f"outliers clipped at median +- {OUTLIER_MADS:g} robust sd",
    )
