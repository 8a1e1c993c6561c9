"""A change between two records of one configuration, estimated from what each side has kept.

The gate (gate/run.py) and the speed rankings (ranking.py) both ask this module, so a ranking and a
gate read the same interval from the same records. analysis/significance.py does the arithmetic;
this module picks the method by what the records hold: runs as the unit where a side has 2+, the
run-to-run spread of a history where one is given, else the two runs' per-step times, else the
bound alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.significance import (
    MIN_STEPS,
    Estimate,
    RunSpread,
    RunSummary,
    bound_only,
    compare_runs,
    compare_steps,
    compare_with_spread,
)

if TYPE_CHECKING:
    from .records import Record

CONFIDENCE = 0.95


def _runs(values: tuple[float, ...], single: float, summarised: Record | None = None) -> RunSummary:
    """A side's runs: each run's value where kept, else the mean and spread of a `repeats` summary
    (step time only), else the one run."""
    if values:
        return RunSummary.of(values)
    rec = summarised
    if rec is not None and rec.repeats > 1 and rec.repeat_step_time_cv is not None:
        mean = rec.repeat_step_time_mean or single
        return RunSummary.from_moments(rec.repeats, mean, rec.repeat_step_time_cv * mean)
    return RunSummary.of([single])


def time_estimate(b: Record, c: Record, spread: RunSpread | None = None) -> Estimate:
    """Step time: runs as the unit where a side has 2+; one run a side against the run-to-run
    spread of earlier runs where a history gave one; else the two runs' per-step times."""
    assert b.step_time and c.step_time
    rb, rc = _runs(b.run_step_times, b.step_time, b), _runs(c.run_step_times, c.step_time, c)
    if rb.n > 1 or rc.n > 1:
        return compare_runs(rb, rc, CONFIDENCE)
    if spread is not None:
        return compare_with_spread(b.step_time, c.step_time, spread, CONFIDENCE)
    if min(len(b.step_samples), len(c.step_samples)) >= MIN_STEPS:
        return compare_steps(b.step_samples, c.step_samples, CONFIDENCE)
    kept = f"{len(b.step_samples)} and {len(c.step_samples)} step times kept, {MIN_STEPS} needed"
    if not b.step_samples or not c.step_samples:
        kept += " (a pytest-benchmark run keeps them with --benchmark-save-data)"
    return bound_only(b.step_time, c.step_time, f"one run a side, {kept}", CONFIDENCE)


def memory_estimate(b: Record, c: Record, spread: RunSpread | None = None) -> Estimate:
    """Peak memory: one number a run, so only repeats (or earlier runs) give a spread to test with."""
    assert b.peak_memory_gb and c.peak_memory_gb
    rb, rc = _runs(b.run_peaks, b.peak_memory_gb), _runs(c.run_peaks, c.peak_memory_gb)
    if rb.n > 1 or rc.n > 1:
        return compare_runs(rb, rc, CONFIDENCE)
    if spread is not None:
        return compare_with_spread(b.peak_memory_gb, c.peak_memory_gb, spread, CONFIDENCE)
    return bound_only(b.peak_memory_gb, c.peak_memory_gb, "one peak a side, no sample to test", CONFIDENCE)
