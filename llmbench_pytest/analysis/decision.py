"""Faster, tied or a regression: the one decision the report's recommendation and tables, `llmbench
compare` and `llmbench gate` ask about speed, how sure it is, and how many sessions a side would
settle it. Nothing that renders a result re-derives any of this.

**The unit is the session.** A pytest session's steps, and its repeats (--llmbench-repeat), share
its machine's state (other load, clocks, the host's CPU, where the allocator put things), so their
spread says nothing about the next session or the next host. Measured (docs/results, pooled by
tools/session_spread.py into decision_spread.json): one configuration's mean step time moves from
session to session by about 0.5% for GPU-bound DDP and up to 10-15% for host-bound ZeRO-3 on one
GPU model, while each run's own 95% interval is often under 1%; on a shared 2-core CPU by 20% and
more. So each side is a list of session means (a session's repeats averaged on the log scale
first), and the difference of the two sides' log means is tested against the spread *between
sessions*:

    se^2 = s_a^2 / k_a + s_b^2 / k_b        (k: sessions a side; s: one session's spread)
    t = (mean log b - mean log a) / se      with the spread's degrees of freedom (Welch-Satterthwaite
                                            where the two sides' spreads differ)

where s comes, in this order, from what measures it:

1. **sessions**: a side with two or more sessions of the configuration (the spread of the session
   means around their side's mean, pooled over both sides);
2. **history**: earlier sessions of the configuration on the same hardware (the gate's --history:
   the mean square of successive differences, so a slow drift is not counted, an outlier is);
3. **prior**: the spread measured for this strategy on this device in saved results
   (decision_prior.py, with where it came from), counted as at most PRIOR_WEIGHT degrees of
   freedom, since it pools other configurations. With 1 or 2 it is combined as a conjugate prior
   (s^2 = (v0 s0^2 + v s^2) / (v0 + v), v0 + v degrees of freedom). Where the sides ran on different
   hosts, a spread measured on one host (a history) is raised to at least the prior, which holds
   the spread between hosts.

A side's spread is never taken below its own noise: the standard deviation of a session's mean
from its steps (or of its repeats' means), so a table's +- cell can never be wider than the
interval a sentence calls "outside the noise". Where nothing measures the spread (no second
session, no history, no prior for the device), there is no test: the answer is INCONCLUSIVE, never
faster or a regression.

Verdicts of b against a (step time; tokens/s is its inverse):

- a ranking (bound 0): FASTER / SLOWER when p < alpha (the interval at 1 - alpha excludes no
  change), else TIED; with the sessions a side that would tell them apart if the difference and
  the spread stayed as measured;
- a gate (bound > 0): REGRESSION when p < alpha AND the change is past the bound (conbench's and
  Chromium's rule), IMPROVED the other way, OK when the interval stays within the bound, else
  INCONCLUSIVE with the sessions a side that would settle it.

`sessions_for_power` is what the gate recommends per configuration before anything is compared:
the sessions a side that catch a slowdown of a given size (twice the bound) as a REGRESSION 95% of
the time, from the spread alone (the noncentral t, scipy.special).

scipy.special is imported where used (about 0.1 s once): the report package stays standard library
at import.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .decision_prior import PRIOR_WEIGHT
from .significance import IMPROVED, INCONCLUSIVE, OK, REGRESSION, Estimate
from .stats import t_quantile

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .decision_prior import Prior

FASTER, SLOWER, TIED = "faster", "slower", "tied"
SESSIONS, HISTORY, PRIOR = "sessions", "history", "prior"
MOST_SESSIONS = 100
"""The most sessions a side the decision suggests; a change that needs more sits on its bound."""
POWER = 0.95
"""The share of slowdowns of the asked size that the recommended sessions a side catch."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: each session's mean step time, and the noise of one session's mean
    from its own steps or repeats."""

    sessions: tuple[float, ...]
    """Mean step time of each session (seconds), its repeats averaged; at least one, each > 0."""
    floor: float = 0.0
    """Standard deviation of one session's log mean from within the session (its steps' interval,
    or its repeats): the spread between sessions is never taken below it."""

    @property
    def k(self) -> int:
        return len(self.sessions)

    @property
    def logs(self) -> list[float]:
        return [math.log(x) for x in self.sessions]

    @property
    def mean_log(self) -> float:
        return statistics.fmean(self.logs)

    @property
    def mean(self) -> float:
        """The geometric mean of the sessions' mean step times."""
        return math.exp(self.mean_log)


@dataclass(frozen=True)
class Spread:
    """How far one session's log mean step time strays from its configuration's level."""

    sd: float
    df: float
    kind: str
    """SESSIONS, HISTORY or PRIOR (the most direct measurement that went into it)."""
    source: str
    """Where it came from, for the reader: 'prior: zero3, causal_lm, on NVIDIA H100 80GB HBM3: 21
    sessions in 7 groups (docs/results, 2026-11-28)'."""
    prior: bool = False
    """A prior went into it (alone, or combined with what was measured)."""

    def how(self) -> str:
        how = {SESSIONS: "measured", HISTORY: "history", PRIOR: "prior"}[self.kind]
        return how + (" and prior" if self.prior and self.kind != PRIOR else "")

    def words(self, other: Spread | None = None) -> str:
        """'spread 9.5% between sessions (prior)', short, for a table; with another side's spread
        that differs (two configurations), 'spread 1.5% and 8.6% between sessions (prior)'."""
        if other is None or other is self or (other.sd, other.how()) == (self.sd, self.how()):
            return f"spread {self.sd:.1%} between sessions ({self.how()})"
        hows = self.how() if self.how() == other.how() else f"{self.how()}; {other.how()}"
        return f"spread {self.sd:.1%} and {other.sd:.1%} between sessions ({hows})"


def session_spread(a: Side, b: Side) -> Spread | None:
    """The spread measured by the sides themselves: sessions around their side's mean, pooled."""
    df = a.k - 1 + b.k - 1
    if df < 1:
        return None
    ss = sum((y - s.mean_log) ** 2 for s in (a, b) for y in s.logs)
    return Spread(math.sqrt(ss / df), df, SESSIONS, f"measured: {a.k} and {b.k} sessions")


def history_spread(values: Sequence[float]) -> Spread | None:
    """The spread of a configuration's earlier sessions, oldest first: the mean square of successive
    log differences over two (von Neumann's; a drift adds little, an outlier counts in full), with
    n - 2 degrees of freedom. None with fewer than 3."""
    y = [math.log(v) for v in values]
    if len(y) < 3:
        return None
    ms = sum((b - a) ** 2 for a, b in itertools.pairwise(y)) / (2 * (len(y) - 1))
    return Spread(math.sqrt(ms), len(y) - 2, HISTORY, f"history: {len(y)} earlier sessions")


def with_prior(measured: Spread | None, prior: Prior | None, cross_host: bool = False) -> Spread | None:
    """The spread to decide with: what was measured, combined with the prior (see the module
    docstring); the prior alone where nothing was measured; None where neither exists."""
    if prior is None:
        return measured
    v0 = min(prior.df, PRIOR_WEIGHT)
    if measured is None:
        return Spread(prior.sd_log, v0, PRIOR, f"prior: {prior.source}", prior=True)
    if cross_host and measured.kind == HISTORY and measured.sd < prior.sd_log:
        # one host's history cannot hold the spread between hosts; the prior does
        source = f"{measured.source}, raised to the prior between hosts ({prior.source})"
        return replace(measured, sd=prior.sd_log, source=source, prior=True)
    var = (v0 * prior.sd_log**2 + measured.df * measured.sd**2) / (v0 + measured.df)
    source = f"{measured.source}; with the prior: {prior.source}"
    return Spread(math.sqrt(var), v0 + measured.df, measured.kind, source, prior=True)


@dataclass(frozen=True)
class Decision:
    """Side b against side a: the change of mean step time, its interval and p-value, the verdict,
    and how many sessions a side would settle a tie or an inconclusive change."""

    base: float
    cur: float
    ratio: float
    """cur / base, step time."""
    low: float | None
    high: float | None
    p_value: float | None
    verdict: str
    sessions: tuple[int, int]
    spread: Spread | None
    """Side a's spread (side b's where only it has one); None: nothing measured it."""
    spread_b: Spread | None = None
    """Side b's, where the sides are two configurations with spreads of their own."""
    df: float | None = None
    confidence: float = 0.95
    floor: float = 0.0
    """The larger side's noise from inside one session, where it exceeded the spread and was used."""
    settle: int | None = None
    """Sessions a side that would turn TIED or INCONCLUSIVE into a verdict, if the difference and
    the spread stayed as measured; None where none up to MOST_SESSIONS does, or nothing measured."""

    @property
    def tested(self) -> bool:
        return self.p_value is not None

    @property
    def method(self) -> str:
        """'t on session means, 1 vs 1 session(s), spread 3.1% between sessions (prior)'."""
        ka, kb = self.sessions
        if self.spread is None:
            return f"not tested: {ka} vs {kb} session(s), nothing measured the spread between sessions"
        inside = f", {self.floor:.1%} inside one session (larger, used)" if self.floor else ""
        return f"t on session means, {ka} vs {kb} session(s), {self.spread.words(self.spread_b)}{inside}"

    @property
    def source(self) -> str:
        """Where the spread came from ('' where nothing measured it)."""
        found = [s.source for s in (self.spread, self.spread_b) if s is not None]
        return "; ".join(dict.fromkeys(found))

    def estimate(self) -> Estimate:
        """The same figures as an Estimate, as the gate's table prints changes."""
        kind = self.spread.kind if self.spread else "untested"
        low = self.low if self.low is not None else self.ratio
        high = self.high if self.high is not None else self.ratio
        return Estimate(
            self.base,
            self.cur,
            self.ratio,
            low,
            high,
            self.p_value,
            kind,
            self.method,
            self.confidence,
            df=self.df,
        )


def _se_df(a: Side, b: Side, sa: Spread, sb: Spread) -> tuple[float, float]:
    va = max(sa.sd, a.floor) ** 2 / a.k
    vb = max(sb.sd, b.floor) ** 2 / b.k
    if sa is sb:
        return math.sqrt(va + vb), sa.df
    df = (va + vb) ** 2 / (va**2 / sa.df + vb**2 / sb.df) if va + vb > 0 else min(sa.df, sb.df)
    return math.sqrt(va + vb), df


def _p(t: float, df: float) -> float:
    from scipy.special import stdtr  # the t distribution's CDF, what scipy.stats.t.sf calls

    return min(1.0, 2 * float(stdtr(df, -abs(t))))


def _verdict(
    d: float, se: float, df: float, bound: float, alpha: float, confidence: float
) -> tuple[str, float, float, float]:
    """(verdict, p, low, high) on the log scale of step time b / a."""
    p = _p(d / se, df) if se > 0 else (0.0 if d else 1.0)
    q = t_quantile(0.5 + confidence / 2, df)
    low, high = d - q * se, d + q * se
    significant = p < alpha
    if bound <= 0:
        return (SLOWER if d > 0 else FASTER) if significant else TIED, p, low, high
    if significant and d > math.log1p(bound):
        return REGRESSION, p, low, high
    if significant and d < math.log1p(-bound):
        return IMPROVED, p, low, high
    # only the worse side can fail a gate: an interval reaching into improvement is no doubt
    return (INCONCLUSIVE if high > math.log1p(bound) else OK), p, low, high


def decide(
    a: Side,
    b: Side,
    spread_a: Spread | None,
    spread_b: Spread | None = None,
    *,
    bound: float = 0.0,
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> Decision:
    """Side b against side a (step time; see the module docstring). `spread_b` defaults to
    `spread_a` (one configuration on both sides); pass each side's own where the sides are different
    configurations (two strategies of one session)."""
    spread_b = spread_a if spread_b is None else spread_b
    d = b.mean_log - a.mean_log
    ratio = math.exp(d)
    ks = (a.k, b.k)
    if spread_a is None or spread_b is None:
        return Decision(
            a.mean,
            b.mean,
            ratio,
            None,
            None,
            None,
            INCONCLUSIVE,
            ks,
            spread_a or spread_b,
            confidence=confidence,
        )
    se, df = _se_df(a, b, spread_a, spread_b)
    verdict, p, low, high = _verdict(d, se, df, bound, alpha, confidence)
    floor = max(a.floor, b.floor)
    used = floor if floor > min(spread_a.sd, spread_b.sd) else 0.0
    out = Decision(
        a.mean,
        b.mean,
        ratio,
        math.exp(low),
        math.exp(high),
        p,
        verdict,
        ks,
        spread_a,
        None if spread_b is spread_a else spread_b,
        df,
        confidence,
        used,
    )
    if verdict in (TIED, INCONCLUSIVE):
        out = replace(out, settle=_settle(a, b, spread_a, spread_b, d, bound, alpha, confidence))
    return out


def _at(a: Side, b: Side, sa: Spread, sb: Spread, k: int) -> tuple[float, float]:
    """se and df with k sessions a side, the spreads as measured (more sessions add degrees of
    freedom where the sides measure the spread themselves or with a prior)."""
    more = 2 * k - a.k - b.k
    fa, fb = replace(sa, df=sa.df + more), replace(sb, df=sb.df + more)
    if sa is sb:
        fb = fa
    ka = Side((1.0,) * k, a.floor)
    kb = Side((1.0,) * k, b.floor)
    return _se_df(ka, kb, fa, fb)


def _settle(
    a: Side, b: Side, sa: Spread, sb: Spread, d: float, bound: float, alpha: float, conf: float
) -> int | None:
    stuck = (TIED, INCONCLUSIVE)
    for k in range(max(a.k, b.k) + 1, MOST_SESSIONS + 1):
        se, df = _at(a, b, sa, sb, k)
        if _verdict(d, se, df, bound, alpha, conf)[0] not in stuck:
            return k
    return None


def power(k: int, effect: float, spread: Spread, bound: float, alpha: float, floor: float = 0.0) -> float:
    """The chance that k sessions a side call a slowdown of `effect` (0.10: 10%) a REGRESSION, with
    this spread: P(T > max(t quantile at alpha, log(1 + bound) / se)) for T noncentral t."""
    from scipy.special import nctdtr

    one = Side((1.0,), floor)  # the spread as it stands; k sessions a side add their degrees of freedom
    se, df = _at(one, one, spread, spread, k)
    if se <= 0:
        return 1.0 if effect > bound else 0.0
    c = max(t_quantile(1 - alpha / 2, df), math.log1p(bound) / se)
    return 1.0 - float(nctdtr(df, math.log1p(effect) / se, c))


def sessions_for_power(
    effect: float,
    spread: Spread | None,
    bound: float,
    alpha: float,
    floor: float = 0.0,
    target: float = POWER,
) -> int | None:
    """The fewest sessions a side (up to MOST_SESSIONS) that catch a slowdown of `effect` with
    probability `target`; None where nothing measured the spread or no count up to the most does."""
    if spread is None:
        return None
    return next(
        (k for k in range(1, MOST_SESSIONS + 1) if power(k, effect, spread, bound, alpha, floor) >= target),
        None,
    )
