"""Speed rankings: which results the measurements tell apart, in the words the report and
`llmbench compare` print.

The report's recommendation, its patterns, the console's "fastest that fits" line (summary/table.py,
through the recommendation) and `llmbench compare` (compare/comparison.py) rank results with this
module, and this module asks the one speed decision (evidence.speed, analysis/decision.py) for
every pair: b is faster or slower than a only where that decision says so, from the spread between
sessions. Where the decision cannot tell them apart, or nothing measured that spread, the two are
tied, and the words say how many sessions a side would tell them apart. Nothing here tests
anything itself.

Standard library at import: scipy loads inside the decision when a comparison runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from ..analysis.decision import FASTER, SLOWER, Decision
from . import fmt
from .evidence import CONFIDENCE, own_spread, speed
from .records import Record, merge_repeats, record_from_result

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from .configs import Config

T = TypeVar("T")


@dataclass(frozen=True)
class Gap:
    """Throughput of b against a: the ratio b / a, its 95% interval, and the decision's words."""

    ratio: float
    low: float | None
    """Lower end of the 95% interval of the ratio; None where nothing measured the spread."""
    high: float | None
    method: str
    """What was compared: 't on session means, 1 vs 1 session(s), spread between sessions 1.6%
    (prior: ...)', or why it was not tested."""
    apart: bool = False
    """The decision tells them apart (faster or slower), not tied and not untested."""
    settle: int | None = None
    """Sessions a side that would tell them apart if the difference and the spread stayed."""
    source: str = ""
    """Where the spread between sessions came from (the prior's data, a history, the sessions)."""

    @classmethod
    def of(cls, decision: Decision) -> Gap:
        """Throughput b / a from the decision on step time b / a (turned over)."""
        d = decision
        low = 1 / d.high if d.high is not None else None
        high = 1 / d.low if d.low is not None else None
        return cls(1 / d.ratio, low, high, d.method, d.verdict in (FASTER, SLOWER), d.settle, d.source)

    @property
    def tested(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def tied(self) -> bool:
        """The decision cannot tell them apart (or nothing measured the spread to tell with)."""
        return not self.apart

    def times(self, k: float) -> Gap:
        """The same comparison of a quantity k x this ratio (a cost per token at another price is
        price ratio / speed ratio: `inverse().times(price_b / price_a)`). Tied costs: the interval
        scaled includes 1."""
        if self.low is None or self.high is None:
            return Gap(self.ratio * k, None, None, self.method)
        low, high = self.low * k, self.high * k
        return Gap(self.ratio * k, low, high, self.method, not low <= 1 <= high)

    def inverse(self) -> Gap:
        """a against b."""
        if self.low is None or self.high is None:
            return Gap(1 / self.ratio, None, None, self.method, self.apart, self.settle, self.source)
        return Gap(
            1 / self.ratio, 1 / self.high, 1 / self.low, self.method, self.apart, self.settle, self.source
        )

    def change(self) -> str:
        """'-3.8% (95% interval -6.4% .. -1.3%)', or '-3.8% (not tested: ...)'."""
        head = fmt.signed_pct(self.ratio - 1)
        if self.low is None or self.high is None:
            return f"{head} (not tested)"
        return f"{head} (95% interval {fmt.signed_pct(self.low - 1)} .. {fmt.signed_pct(self.high - 1)})"

    def ratio_interval(self) -> str:
        """'0.51x .. 1.05x' ('' where not tested)."""
        return f"{fmt.ratio(self.low)} .. {fmt.ratio(self.high)}" if self.tested else ""

    def settle_words(self) -> str:
        """'5 sessions a side would tell them apart', for a tie."""
        if self.apart:
            return ""
        if self.settle is not None:
            return f"{self.settle} sessions a side would tell them apart if the difference held"
        if not self.tested:
            return "two or more sessions a side would measure the spread between sessions"
        return "no number of sessions up to 100 a side tells them apart at this difference"


def own_interval(rec: Record) -> float | None:
    """How far one session of this result may stray from its configuration's level: the relative
    half-width of the 95% interval of one session's mean, from the spread between sessions the
    decision uses (never below the session's own noise). None where nothing measured that spread."""
    spread = own_spread(rec)
    if spread is None:
        return None
    from ..analysis.stats import t_quantile

    return t_quantile(0.5 + CONFIDENCE / 2, spread.df) * max(spread.sd, rec.mean_sd)


def speed_gap(a: Record, b: Record) -> Gap:
    """Throughput of b against a (same tokens per step): the decision on their step times."""
    if not (a.step_time and b.step_time):  # a result with tokens/s alone: nothing to test
        ratio = (b.tokens_per_sec or 0) / (a.tokens_per_sec or 1)
        return Gap(ratio, None, None, "not tested: no mean step time was recorded")
    return Gap.of(speed(a, b))


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
        the items tied for the fastest (summary/table.py gets the words from the ranking it is
        handed)."""
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
        itself = Gap(1.0, 1.0, 1.0, "the fastest itself", apart=True)
        gaps = [itself, *(self.gap(order[0], x) for x in order[1:])]
        return Ranking(order, gaps, self.interval)


def methods(gaps: Iterable[Gap]) -> str:
    """The methods behind some gaps, each once."""
    return "; ".join(dict.fromkeys(g.method for g in gaps))


def sources(gaps: Iterable[Gap]) -> list[str]:
    """Where the spreads behind some gaps came from, each once."""
    return list(dict.fromkeys(part for g in gaps if g.source for part in g.source.split("; ")))


def tied_phrase(names: Sequence[str], intervals: Sequence[float | None]) -> str:
    """'a, b and c are tied on speed (within their +-8.0%, +-8.6% and +-7.9% intervals between
    sessions)'; 'not told apart' where nothing measured the spread between sessions."""
    if all(h is None for h in intervals):
        return f"{and_list(names)} are not told apart on speed (nothing measured the spread between sessions)"
    widths = [f"+-{fmt.pct(h)}" if h is not None else "unmeasured" for h in intervals]
    return f"{and_list(names)} are tied on speed (within their {and_list(widths)} intervals between sessions)"


def and_list(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
