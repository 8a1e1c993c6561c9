"""Runs inside each rank: how many steps the measured window holds, and why it stopped.

Fixed (--llmbench-steps, spec.min_steps == 0): exactly spec.steps. Adaptive: at least
spec.min_steps, then until the mean step time is known to +-spec.precision (the 95% interval of
analysis/stats.mean_interval: outliers clipped, correlated steps allowed for), at most spec.steps.

The decision is taken at check points, the same step numbers on every rank: each rank hands in
the steps its device has finished (CUDA events are asked, never waited for, so the window has no
host synchronization), one all-gather over the steps group gives every rank the same list of
slowest-rank step times, and every rank computes the same interval from it. Identical inputs,
identical arithmetic: all ranks stop after the same step without a second message. Between check
points a rank only queues steps; a check point costs one small gloo all-gather.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.stats import mean_interval, t_quantile
from .dist import gather_steps
from .progress import note

if TYPE_CHECKING:
    from ..config.spec import RunSpec
    from .dist import DistContext
    from .timing import StepClock

FIXED, PRECISION, CAP = "fixed", "precision", "cap"
"""Why measurement stopped: a fixed count, the precision reached, or the cap reached first."""


@dataclass(frozen=True)
class StopRule:
    adaptive: bool
    min_steps: int
    cap: int
    target: float
    every: int
    """Steps between check points (after min_steps); also how often a fixed window reports progress."""

    @classmethod
    def of(cls, spec: RunSpec) -> StopRule:
        adaptive = spec.min_steps > 0
        # the interval's t quantile loads scipy at its first use: here, before the window opens,
        # not at the first check point inside it
        t_quantile(0.975, 10)
        low = spec.min_steps if adaptive else spec.steps
        # a check point every few steps: often enough to stop soon after the target is reached,
        # rarely enough that the all-gathers cost nothing next to the steps
        every = max(2, low // 2) if adaptive else max(1, spec.steps // 10)
        return cls(adaptive, low, spec.steps, spec.precision, every)

    def checks_at(self, done: int) -> bool:
        """Whether the step numbered `done` (1-based) ends with a check point."""
        if done >= self.cap:
            return False  # the window closes here anyway
        if self.adaptive:
            return done >= self.min_steps and (done - self.min_steps) % self.every == 0
        return done % self.every == 0

    def plan(self) -> dict[str, Any]:
        """What was asked, for result.json."""
        if not self.adaptive:
            return {"mode": FIXED, "steps": self.cap}
        return {
            "mode": "adaptive",
            "min_steps": self.min_steps,
            "max_steps": self.cap,
            "target_precision": self.target,
            "check_every": self.every,
        }


@dataclass(frozen=True)
class Reading:
    steps: int
    """Steps the reading covers: those every rank's device had finished (adaptive), or this rank's."""
    mean: float | None
    precision: float | None
    """Relative half-width of the mean's 95% interval; None below two steps."""


def read(ctx: DistContext, clock: StepClock, rule: StopRule) -> Reading:
    """The finished steps so far: every rank's slowest-rank times when the decision depends on it
    (adaptive), else this rank's own (a progress estimate only, no collective)."""
    done = clock.completed()
    durations = clock.durations(done)
    times = gather_steps(ctx, done, durations, rule.cap) if rule.adaptive else durations
    interval = mean_interval(times)
    mean = sum(times) / len(times) if times else None
    return Reading(len(times), mean, interval.relative if interval is not None else None)


def check_point(
    ctx: DistContext, clock: StepClock, rule: StopRule, done: int, tokens_per_step: int, log: logging.Logger
) -> bool:
    """Read the finished steps, report progress, and say whether to stop after step `done`."""
    reading = read(ctx, clock, rule)
    fields: dict[str, Any] = {"phase": "measuring", "step": done, "steps": rule.cap}
    if rule.adaptive:
        fields["min_steps"] = rule.min_steps
    if reading.precision is not None:
        fields["precision"] = round(reading.precision, 5)
    if reading.mean:
        fields["tokens_per_sec"] = round(tokens_per_step / reading.mean, 2)
    mean = f"{reading.mean:.4g} s" if reading.mean else "n/a"
    where = f"+-{reading.precision:.1%}" if reading.precision is not None else "(no interval yet)"
    note(log, logging.INFO, fields, "step %d/%d: mean step time %s %s over %d finished steps",
         done, rule.cap, mean, where, reading.steps)  # fmt: skip
    return (
        rule.adaptive
        and reading.steps >= rule.min_steps
        and reading.precision is not None
        and reading.precision <= rule.target
    )
