"""What two records of a configuration hold, turned into the speed decision's inputs; and the
change of peak memory, which is one number a run.

The gate (gate/run.py) and the speed rankings of the report and `llmbench compare` (ranking.py)
both ask `speed`, so a ranking and a gate read the same verdict from the same records; the
decision itself is analysis/decision.py's. A record gives its sessions (each session's mean step
time, its repeats averaged), how well one session's mean is known from inside it, and its device,
workload and strategy, by which the prior spread between sessions is found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.decision import (
    Decision,
    Side,
    Spread,
    decide,
    history_spread,
    session_spread,
    sessions_for_power,
    with_prior,
)
from ..analysis.decision_prior import prior_for
from ..analysis.significance import (
    Estimate,
    RunSpread,
    RunSummary,
    bound_only,
    compare_runs,
    compare_with_spread,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .records import Record

CONFIDENCE = 0.95


def side(rec: Record) -> Side:
    """A record's sessions: each one's mean step time where it holds several, else its one mean."""
    assert rec.step_time
    return Side(rec.session_step_times or (rec.step_time,), rec.mean_sd)


def own_spread(rec: Record) -> Spread | None:
    """The spread between sessions of one record's configuration: its own sessions where it holds
    two or more, combined with the prior for its device, workload and strategy."""
    s = side(rec)
    return with_prior(
        session_spread(s, Side(s.sessions[:1])),
        prior_for(rec.hardware, rec.key.workload, rec.key.strategy, rec.key.model),
    )


def pair_spread(a: Record, b: Record, history: Sequence[float] = ()) -> Spread | None:
    """The spread of one configuration measured on two sides: the sides' own sessions, else the
    history's earlier sessions, combined with the prior (raised to the prior where a history of one
    host meets a side from another)."""
    measured = session_spread(side(a), side(b)) or history_spread(history)
    cross = a.hardware != b.hardware or (bool(a.host and b.host) and a.host != b.host)
    return with_prior(measured, prior_for(b.hardware, b.key.workload, b.key.strategy, b.key.model), cross)


def speed(
    a: Record, b: Record, *, history: Sequence[float] = (), bound: float = 0.0, alpha: float = 1 - CONFIDENCE
) -> Decision:
    """Step time of b against a (see analysis/decision.py). One configuration on both sides (the
    gate, `llmbench compare`): one spread, measured on both; two configurations (the report's
    strategies): each its own."""
    if a.key == b.key:
        spread = pair_spread(a, b, history)
        return decide(side(a), side(b), spread, bound=bound, alpha=alpha, confidence=CONFIDENCE)
    return decide(
        side(a), side(b), own_spread(a), own_spread(b), bound=bound, alpha=alpha, confidence=CONFIDENCE
    )


def per_sample(a: Record, b: Record, bound: float, alpha: float = 1 - CONFIDENCE) -> Decision:
    """Time per sample of b against a, for configurations whose steps do different work (the LoRA
    diagnostic's variants change the batch or the sequence): the same decision on 1 / samples/s,
    each side with its own spread between sessions. IMPROVED: b is faster by more than `bound`."""
    assert a.samples_per_sec and b.samples_per_sec
    sa, sb = Side((1 / a.samples_per_sec,), a.mean_sd), Side((1 / b.samples_per_sec,), b.mean_sd)
    return decide(sa, sb, own_spread(a), own_spread(b), bound=bound, alpha=alpha, confidence=CONFIDENCE)


def sessions_needed(a: Record, b: Record, effect: float, bound: float, alpha: float) -> int | None:
    """Sessions a side that catch a slowdown of `effect` of this configuration 95% of the time."""
    return sessions_for_power(effect, pair_spread(a, b), bound, alpha, max(a.mean_sd, b.mean_sd))


def _runs(values: tuple[float, ...], single: float) -> RunSummary:
    return RunSummary.of(values) if values else RunSummary.of([single])


def memory_estimate(b: Record, c: Record, spread: RunSpread | None = None) -> Estimate:
    """Peak memory: one number a run, so only repeats (or earlier runs) give a spread to test with;
    peaks that agree exactly compare exactly (a peak is often deterministic)."""
    assert b.peak_memory_gb and c.peak_memory_gb
    rb, rc = _runs(b.run_peaks, b.peak_memory_gb), _runs(c.run_peaks, c.peak_memory_gb)
    if rb.n > 1 or rc.n > 1:
        return compare_runs(rb, rc, CONFIDENCE)
    if spread is not None:
        return compare_with_spread(b.peak_memory_gb, c.peak_memory_gb, spread, CONFIDENCE)
    return bound_only(b.peak_memory_gb, c.peak_memory_gb, "one peak a side, no sample to test", CONFIDENCE)
