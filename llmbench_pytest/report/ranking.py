"""Ties on speed: when two results' difference in throughput is inside the measurement's noise.

The one place that decides whether llmbench may call one result faster than another. The
recommendation (recommend.py), its patterns, the console's "fastest that fits" line (table.py via
the recommendation) and `llmbench compare` (compare.py) all ask this module, so none of them names
a winner that a rerun could reverse.

The rule, for results a and b of the same work per step (one scenario, or one configuration on two
machines or sessions):

    tied  <=>  the 95% interval of tokens/s(b) / tokens/s(a) includes 1

The interval is the regression gate's own (gate.time_estimate, analysis/significance.py), on the
ratio of the mean step times turned over (tokens per step are the same on both sides):

- runs as the unit where a side has 2+ runs (--llmbench-repeat, or a folder of repeats): Student's
  or Welch's t on the log of each run's mean: the run-to-run spread;
- one run a side with 8+ step times: the circular block bootstrap of each run's mean step time;
- fewer step times (a short fixed window): each run's recorded 95% interval of its mean step time
  (analysis/stats.mean_interval, result.json's `step_time_mean_interval` and
  `timing.measurement.precision`), recomputed from its step times, combined in quadrature on the
  log scale: |log(b / a)| <= sqrt(h_a^2 + h_b^2), the interval of a difference of two independent
  estimates (two intervals merely overlapping is a looser test that calls more real differences
  ties);
- neither step times nor repeats (a pytest-benchmark file saved without --benchmark-save-data):
  not tested; the difference is named with a word that it could not be tested.

For the t-tests this is the gate's p-value of 0.05 or more (the bootstrap's percentile p-value
agrees up to its resampling). The gate fails a build only at p < 0.01 and past a bound, a stricter
question; this one is only "can the measurements tell the two apart at all". One run a side
measures step-to-step noise, not run-to-run noise, so a difference found that way carries the
gate's caveat (`Gap.within_run`).

Standard library at import: numpy and scipy load inside the gate's functions when a comparison
runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from ..analysis.significance import STEPS, RunSummary
from ..analysis.stats import mean_interval, t_quantile
from . import fmt
from .estimates import CONFIDENCE, time_estimate
from .records import Record, merge_repeats, record_from_result

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from .configs import Config

T = TypeVar("T")

WITHIN_RUN = "from each run's own steps, so run-to-run noise is not in it: --llmbench-repeat=3 measures it"
"""Said where a named difference comes from one run a side: the gate measured 30% false alarms
that way on a shared CPU (docs/reports.md), none on a GPU-bound workload."""


@dataclass(frozen=True)
class Gap:
    """Throughput of b against a: the ratio b / a, its 95% interval, and how it was computed."""

    ratio: float
    low: float | None
    """Lower end of the 95% interval of the ratio; None where nothing could be tested."""
    high: float | None
    method: str
    """What was compared: the gate's method ('block bootstrap, 40 vs 40 steps, block 3', 'Student
    t, 3 vs 3 runs'), 'each run's 95% interval ...', or why it was not tested."""
    within_run: bool = False
    """The interval holds step-to-step noise only (one run a side)."""

    @property
    def tested(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def tied(self) -> bool:
        """The rule of this module: the interval includes no difference."""
        return self.low is not None and self.high is not None and self.low <= 1 <= self.high

    def times(self, k: float) -> Gap:
        """The same comparison of a quantity k x this ratio (a cost per token at another price is
        price ratio / speed ratio: `inverse().times(price_b / price_a)`)."""
        if self.low is None or self.high is None:
            return Gap(self.ratio * k, None, None, self.method, self.within_run)
        return Gap(self.ratio * k, self.low * k, self.high * k, self.method, self.within_run)

    def inverse(self) -> Gap:
        """a against b."""
        if self.low is None or self.high is None:
            return Gap(1 / self.ratio, None, None, self.method, self.within_run)
        return Gap(1 / self.ratio, 1 / self.high, 1 / self.low, self.method, self.within_run)

    def change(self) -> str:
        """'-3.8% (95% interval -6.4% .. -1.3%)', or '-3.8% (not tested: ...)'."""
        head = fmt.signed_pct(self.ratio - 1)
        if self.low is None or self.high is None:
            return f"{head} ({self.method})"
        return f"{head} (95% interval {fmt.signed_pct(self.low - 1)} .. {fmt.signed_pct(self.high - 1)})"

    def ratio_interval(self) -> str:
        """'0.51x .. 1.05x' ('' where not tested)."""
        return f"{fmt.ratio(self.low)} .. {fmt.ratio(self.high)}" if self.tested else ""


def own_interval(rec: Record) -> float | None:
    """How well one result's mean step time is known: the relative half-width of its 95% interval.
    Repeats: the t interval of the mean of the runs' means (their run-to-run spread); one run: the
    interval of its mean step time that result.json records (mean_interval over its step times).
    None where neither was kept."""
    runs = _runs(rec)
    if runs is not None:
        return t_quantile(0.5 + CONFIDENCE / 2, runs.n - 1) * runs.sd_log / math.sqrt(runs.n)
    interval = mean_interval(list(rec.step_samples)) if len(rec.step_samples) > 1 else None
    return interval.relative if interval is not None else None


def _runs(rec: Record) -> RunSummary | None:
    if len(rec.run_step_times) > 1:
        return RunSummary.of(rec.run_step_times)
    if rec.repeats > 1 and rec.repeat_step_time_cv is not None:
        mean = rec.repeat_step_time_mean or rec.step_time or 1.0
        return RunSummary.from_moments(rec.repeats, mean, rec.repeat_step_time_cv * mean)
    return None


def speed_gap(a: Record, b: Record) -> Gap:
    """Throughput of b against a (same tokens per step), and whether the difference is real: the
    gate's estimate of the step-time ratio b / a, turned over; see the module docstring."""
    if not (a.step_time and b.step_time):  # a result with tokens/s alone: nothing to test
        ratio = (b.tokens_per_sec or 0) / (a.tokens_per_sec or 1)
        return Gap(ratio, None, None, "not tested: no mean step time was recorded")
    est = time_estimate(a, b)  # step time b / a, with the gate's interval
    if est.tested:
        return Gap(1 / est.ratio, 1 / est.high, 1 / est.low, est.method, within_run=est.kind == STEPS)
    ratio = a.step_time / b.step_time
    ha, hb = own_interval(a), own_interval(b)
    if ha is None or hb is None:
        why = "not tested: no step times or repeats were kept to measure the noise"
        return Gap(ratio, None, None, why)
    # the two means' intervals on the log scale (relative half-widths), as independent estimates
    half = math.hypot(ha, hb)
    method = f"each run's 95% interval of its mean step time (+-{fmt.pct(ha)}, +-{fmt.pct(hb)}), combined"
    # the gate tests any side with repeats by its runs, so this is one run a side: within-run noise
    return Gap(ratio, ratio * math.exp(-half), ratio * math.exp(half), method, within_run=True)


def record_of(config: Config) -> Record:
    """A report configuration as the gate reads it: its finished runs merged as repeats."""
    merged = merge_repeats(record_from_result(r.data, str(r.path)) for r in config.ok_runs)
    return merged[0]


@dataclass
class Ranking(Generic[T]):
    """Items by throughput, and which of them the measurements cannot tell from the fastest."""

    order: list[T]
    """Fastest point estimate first."""
    gaps: list[Gap]
    """gaps[i]: order[i] against order[0] (gaps[0] is order[0] against itself)."""
    own: Callable[[T], float | None]
    """An item's own interval (own_interval of its record), as +- a share of its mean step time;
    asked only for the items a sentence shows (it costs a pass over the step times)."""

    @property
    def top(self) -> T:
        return self.order[0]

    @property
    def tied(self) -> list[T]:
        """The fastest and every item tied with it, fastest first."""
        return [x for x, g in zip(self.order, self.gaps, strict=True) if x is self.top or g.tied]

    @property
    def is_tie(self) -> bool:
        return len(self.tied) > 1

    def gap(self, item: T) -> Gap:
        return self.gaps[self._index(item)]

    def tie_phrase(self, name: Callable[[T], str]) -> str:
        """'a, b and c are tied on speed (within their +-8.0%, +-8.6% and +-7.9% intervals)', for
        the items tied for the fastest (callers that must not import this module, table.py, get
        the words from the ranking they are handed)."""
        return tied_phrase([name(x) for x in self.tied], [self.interval(x) for x in self.tied])

    def interval(self, item: T) -> float | None:
        return self.own(item)

    def first_untied(self) -> T | None:
        """The fastest item the fastest is measurably faster than (or one it could not be tested
        against)."""
        pairs = zip(self.order, self.gaps, strict=True)
        return next((x for x, g in pairs if x is not self.top and not g.tied), None)

    def _index(self, item: T) -> int:
        return next(i for i, x in enumerate(self.order) if x is item)


class Speeds(Generic[T]):
    """Throughput comparisons among items (report configurations, or one configuration's inputs in
    `llmbench compare`), each read once as a Record; each pair's gap is computed once."""

    def __init__(self, items: Sequence[T], record: Callable[[T], Record]) -> None:
        self._items = list(items)  # kept alive: records and gaps are keyed by id
        self._records = {id(x): record(x) for x in self._items}
        self._gaps: dict[tuple[int, int], Gap] = {}

    def record(self, item: T) -> Record:
        return self._records[id(item)]

    def gap(self, a: T, b: T) -> Gap:
        """b against a. Each pair is estimated once, the faster point estimate as the base (as a
        ranking compares each item with the fastest), and turned over for the other direction: a
        block bootstrap resamples its two sides in order, so the pair's interval would otherwise
        move in its last digit with the order the questions came in."""
        ra, rb = self.record(a), self.record(b)
        if (ra.tokens_per_sec or 0, ra.source) < (rb.tokens_per_sec or 0, rb.source):
            return self.gap(b, a).inverse()
        key = (id(a), id(b))
        if key not in self._gaps:
            self._gaps[key] = speed_gap(ra, rb)
        return self._gaps[key]

    def interval(self, item: T) -> float | None:
        return own_interval(self.record(item))

    def ranking(self, items: Sequence[T] | None = None) -> Ranking[T]:
        """The items (default: all) by tokens/s, each against the fastest."""
        order = sorted(items or self._items, key=lambda x: -(self.record(x).tokens_per_sec or 0))
        itself = Gap(1.0, 1.0, 1.0, "the fastest itself")
        gaps = [itself, *(self.gap(order[0], x) for x in order[1:])]
        return Ranking(order, gaps, self.interval)


def methods(gaps: Iterable[Gap]) -> str:
    """The methods behind some gaps, each once: 'block bootstrap, 24 vs 24 steps' (the block
    lengths, which differ from series to series, are left to each gap's own `method`)."""
    return "; ".join(dict.fromkeys(re.sub(r", blocks? [\d/]+$", "", g.method) for g in gaps))


def tied_phrase(names: Sequence[str], intervals: Sequence[float | None]) -> str:
    """'a, b and c are tied on speed (within their +-8.0%, +-8.6% and +-7.9% intervals)'."""
    widths = [f"+-{fmt.pct(h)}" if h is not None else "unmeasured" for h in intervals]
    return f"{and_list(names)} are tied on speed (within their {and_list(widths)} intervals)"


def and_list(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
