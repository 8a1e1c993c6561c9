"""Runs inside each rank: how many steps the measured window holds, and why it stopped.

Fixed (--llmbench-steps, spec.min_steps == 0): exactly spec.steps. Adaptive: at least
spec.min_steps, then until the mean step time is known to +-spec.precision (the 95% interval of
analysis/stats.mean_interval: outliers clipped, correlated steps allowed for), or until the
finished steps add up to spec.window_budget_s with the mean known at least to
+-spec.budget_precision (a jittery configuration would otherwise run to the cap for little more
precision; one known worse than the bound it is judged by runs on), at most spec.steps. With a
budget, the cap does not end a window whose mean is known worse than that bound either: it goes
on while the budget lasts (up to PAST_CAP times the cap), as the encoder-decoder's epochs do
(epoch_loop.py). Short steps reach the cap long before the budget: on 1x H100 (2026-11-26) a tiny
model's 16 ms steps reached the 100-step cap after 1.8 s known to +-11.0%, and its healthy run
failed mean_interval at +-10%. result.json says which stopped it and the precision reached.

The decision is taken at check points, the same step numbers on every rank (StopRule.next_check
schedules each from what the last one read): each rank hands in
the steps its device has finished (CUDA events are asked, never waited for, so the window has no
host synchronization), one all-gather over the steps group gives every rank the same list of
slowest-rank step times, and every rank computes the same interval from it. Identical inputs,
identical arithmetic: all ranks stop after the same step without a second message. Between check
points a rank only queues steps; a check point costs one small gloo all-gather.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.stats import mean_interval, t_quantile
from .dist import gather_steps
from .progress import note

if TYPE_CHECKING:
    from ..config.spec import RunSpec
    from .dist import DistContext
    from .timing import StepClock

FIXED, PRECISION, CAP, BUDGET = "fixed", "precision", "cap", "budget"
"""Why measurement stopped: a fixed count, the precision reached, the cap reached first, or the
window's time budget spent first."""
STOPPED_BY = {FIXED: "a fixed count", PRECISION: "precision reached", CAP: "the cap reached",
              BUDGET: "the time budget spent"}  # fmt: skip
PAST_CAP = 10
"""How far past its cap a budgeted window may go (in multiples of the cap) while its mean is known
worse than the bound it is judged by: the budget ends it first unless steps take under
budget_s / (PAST_CAP x cap) seconds (20 ms on a GPU's defaults)."""


@dataclass(frozen=True)
class StopRule:
    adaptive: bool
    min_steps: int
    cap: int
    target: float
    every: int
    """Steps between check points (after min_steps); also how often a fixed window reports progress."""
    budget_s: float = 0.0
    """Adaptive: stop at the first check point where the finished steps add up to this many seconds
    (0: no budget, only the precision and the cap stop the window)..."""
    budget_precision: float = 0.10
    """... and the mean is known to this: short of it the window goes on, past the cap while the
    budget lasts, so that the mean_interval check can judge what the budget stopped."""

    @property
    def last(self) -> int:
        """The most steps the window can hold: the cap, or PAST_CAP times it with a budget."""
        return self.cap * PAST_CAP if self.adaptive and self.budget_s > 0 else self.cap

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
        budget = spec.window_budget_s if adaptive else 0.0
        return cls(adaptive, low, spec.steps, spec.precision, every, budget, spec.budget_precision)

    @property
    def first_check(self) -> int:
        """The step (1-based) the first check point follows."""
        return self.min_steps if self.adaptive else self.every

    def next_check(self, done: int, finished: int, mean: float | None) -> int:
        """After the check point at step `done`, which read `finished` steps of mean `mean` (the
        same gathered figures on every rank, so every rank schedules the same step): the step the
        next check point follows. Every `every` steps, but sooner where the window could stop
        sooner: as soon as min_steps will have finished (the device runs a step or so behind the
        host, so the first check point often reads one step short), and as soon as the finished
        steps will add up to the budget (a check point every `every` steps let a budgeted window
        run up to `every` steps past it: 1.5 to 2.5 s of offload steps on 1x H100, 2026-11-26).
        A step's finished count at a later check point is its number less the same lag, so the
        steps still wanted are added to `done` as they are. Past the cap, a check point every
        fifth of the cap (each reads every step so far)."""
        if not self.adaptive:
            return done + self.every
        if done >= self.cap:
            return done + max(self.every, self.cap // 5)
        wanted = self.every
        if finished < self.min_steps:
            wanted = self.min_steps - finished
        elif self.budget_s and mean:
            left = self.budget_s - mean * finished
            if left > 0:
                wanted = min(wanted, math.ceil(left / mean))
        return min(done + max(1, wanted), self.cap)

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
            "budget_s": self.budget_s or None,
            "budget_precision": self.budget_precision if self.budget_s else None,
            "steps_past_cap_up_to": self.last if self.last > self.cap else None,
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
    times = gather_steps(ctx, done, durations, rule.last) if rule.adaptive else durations
    interval = mean_interval(times)
    mean = sum(times) / len(times) if times else None
    return Reading(len(times), mean, interval.relative if interval is not None else None)


def stop_reason(
    rule: StopRule, steps: int, precision: float | None, elapsed_s: float, done: int = 0
) -> str | None:
    """Whether an adaptive window stops at a check point after step `done`, with `steps` finished
    steps that took `elapsed_s` between them: PRECISION, BUDGET, CAP (at or past the cap, the mean
    known within the bound it is judged by), or None to go on. Every rank passes the same figures,
    so every rank decides the same."""
    if not rule.adaptive or steps < rule.min_steps:
        return None
    if precision is not None and precision <= rule.target:
        return PRECISION
    within = precision is not None and precision <= rule.budget_precision
    spent = bool(rule.budget_s) and elapsed_s >= rule.budget_s
    if spent and (within or done >= rule.cap):
        return BUDGET
    if done >= rule.cap and (within or not rule.budget_s):
        return CAP
    return None


def check_point(
    ctx: DistContext, clock: StepClock, rule: StopRule, done: int, tokens_per_step: int, log: logging.Logger
) -> tuple[str | None, int]:
    """Read the finished steps, report progress, and say whether to stop after step `done`
    (PRECISION or BUDGET) or go on (None), and after which step the next check point comes."""
    reading = read(ctx, clock, rule)
    fields: dict[str, Any] = {"phase": "measuring", "step": done, "steps": max(rule.cap, done)}
    if rule.adaptive:
        fields["min_steps"] = rule.min_steps
    if reading.precision is not None:
        fields["precision"] = round(reading.precision, 5)
    if reading.mean:
        fields["tokens_per_sec"] = round(tokens_per_step / reading.mean, 2)
    mean = f"{reading.mean:.4g} s" if reading.mean else "n/a"
    where = f"+-{reading.precision:.1%}" if reading.precision is not None else "(no interval yet)"
    past = ""
    if done > rule.cap:
        past = " (past the cap: the mean is not yet known within the bound it is judged by)"
    note(log, logging.INFO, fields, "step %d/%d: mean step time %s %s over %d finished steps%s",
         done, rule.cap, mean, where, reading.steps, past)  # fmt: skip
    # the gathered steps' sum, not this rank's clock: the same figure on every rank
    elapsed = reading.mean * reading.steps if reading.mean else 0.0
    why = stop_reason(rule, reading.steps, reading.precision, elapsed, done)
    return why, rule.next_check(done, reading.steps, reading.mean)
