"""One configuration, baseline against current: its changes of tokens/s, step time and peak memory,
each with its verdict.

Speed is the speed decision's (evidence.speed, analysis/decision.py): sessions as the unit, the
spread between sessions from the sides' own sessions, the history or the prior, and a verdict
against the bound; tokens/s is tokens per step / step time, so it is the same test turned over,
judged against its own bound. Peak memory is one number a run: exact where the peaks agree, tested
where repeats or a history give a spread, else compared with the bound alone. Each configuration
also gets the sessions a side that would catch a slowdown of twice the step-time bound 95% of the
time (what the gate recommends and prints).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...analysis.significance import INCONCLUSIVE, REGRESSION, decide, repeats_to_settle
from ..evidence import memory_estimate, sessions_needed, speed
from .result import MOST_REPEATS, Change

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...analysis.significance import RunSpread
    from ...config.gate_bounds import GateBounds
    from ..records import Record, RecordKey

NO_MEMORY = "peak memory not measured on both sides"


def _memory(key: RecordKey, b: Record, c: Record, bounds: GateBounds, spread: RunSpread | None) -> Change:
    est = memory_estimate(b, c, spread)
    verdict = decide(est, bounds.memory_rise, True, bounds.alpha)
    needed = None
    if verdict == INCONCLUSIVE:
        needed = repeats_to_settle(est, bounds.memory_rise, True, bounds.alpha, MOST_REPEATS)
    return Change(key, "peak memory", est.base, est.cur, est, bounds.memory_rise, verdict, needed)


def _speed(
    key: RecordKey, b: Record, c: Record, bounds: GateBounds, history: Sequence[float]
) -> list[Change]:
    a = bounds.alpha
    catch = sessions_needed(b, c, 2 * bounds.step_time_rise, bounds.step_time_rise, a)
    out = []
    if b.tokens_per_sec and c.tokens_per_sec and b.step_time:
        # a fall of tokens/s by x is a rise of step time by 1 / (1 - x) - 1
        drop = speed(b, c, history=history, bound=1 / (1 - bounds.tokens_drop) - 1, alpha=a)
        est = drop.estimate()
        per_step = b.tokens_per_sec * b.step_time  # the baseline's tokens per step, on both sides
        tokens = est.inverse(per_step / est.base, per_step / est.cur)
        out.append(
            Change(
                key,
                "tokens/s",
                tokens.base,
                tokens.cur,
                tokens,
                bounds.tokens_drop,
                drop.verdict,
                drop.settle,
                catch,
            )
        )
    rise = speed(b, c, history=history, bound=bounds.step_time_rise, alpha=a)
    est = rise.estimate()
    spread = f"spread {rise.spread.sd:.1%} between sessions, {rise.source}" if rise.spread else ""
    out.append(
        Change(
            key,
            "step time",
            est.base,
            est.cur,
            est,
            bounds.step_time_rise,
            rise.verdict,
            rise.settle,
            catch,
            spread,
        )
    )
    return out


def compare_records(
    key: RecordKey,
    b: Record,
    c: Record,
    bounds: GateBounds,
    history: Sequence[float] = (),
    memory_spread: RunSpread | None = None,
) -> tuple[list[Change], list[str]]:
    """The changes of one configuration, and notes on what could not be compared. `history`: the
    configuration's earlier sessions' mean step times (oldest first), `memory_spread` their peaks'
    spread, where a history was given."""
    if b.ok and not c.ok:
        return [Change(key, "status", "ok", c.status, None, None, REGRESSION)], []
    if not b.ok:
        return [], [f"{key.label()}: baseline status {b.status}, nothing to compare against"]
    out: list[Change] = []
    notes: list[str] = []
    if b.step_time and c.step_time:
        out += _speed(key, b, c, bounds, history)
    if b.peak_memory_gb and c.peak_memory_gb:
        if b.memory_kind != c.memory_kind:
            notes.append(f"{key.label()}: peak memory not compared ({b.memory_kind} vs {c.memory_kind})")
        else:
            out.append(_memory(key, b, c, bounds, memory_spread))
    else:
        notes.append(NO_MEMORY)
    return out, notes
