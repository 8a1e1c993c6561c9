"""Seed 000: step time should not vary by more than 10% between runs; seed 001: repeats agree."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping


def check_step_time_cv(result: Mapping[str, Any], max_cv: float) -> CheckOutcome:
    """Step time consistent: coefficient of variation under the bound (seed 000: 10%). Runs in
    epochs are held to their epochs' wall times instead (see _epoch_time_cv)."""
    name = "step_time_cv"
    if result.get("epochs"):
        return _epoch_time_cv(result, result["epochs"], max_cv)
    cv = result.get("step_time_cv")
    if cv is None:
        return CheckOutcome(name, None, "no step times measured")
    detail = (
        f"CV {cv:.1%} (mean {result['mean_step_time_sec']:.4f} s, std {result['step_time_std_sec']:.4f} s, "
        f"min {result['step_time_min_sec']:.4f} s, max {result['step_time_max_sec']:.4f} s "
        f"over {result['steps']} steps)"
    )
    return _cv_verdict(
        result,
        cv,
        max_cv,
        quantity="step time",
        detail=detail,
        fix="Add warm-up (--llmbench-warmup) or steps (--llmbench-steps)",
    )


def _cv_verdict(
    result: Mapping[str, Any], cv: float, max_cv: float, *, quantity: str, detail: str, fix: str
) -> CheckOutcome:
    """The step-time check's outcome for a measured CV of `quantity` (`detail`: the numbers);
    `fix` is the first remedy, a quieter machine and a looser bound follow."""
    if cv <= max_cv:
        return CheckOutcome("step_time_cv", True, f"{quantity} {detail} <= {max_cv:.1%}", cv, max_cv)
    return CheckOutcome(
        "step_time_cv",
        False,
        f"{result.get('strategy')}: {quantity} varies too much: {detail} > {max_cv:.1%}. "
        f"{fix}, run on a quieter machine, or raise --llmbench-max-cv.",
        cv,
        max_cv,
    )


def _epoch_time_cv(result: Mapping[str, Any], epochs: list[Mapping[str, Any]], max_cv: float) -> CheckOutcome:
    """Epochs through a DataLoader: the epochs' wall times must agree. Their step times vary by
    design, with each batch's arrival and, where the GPU outruns a small model, with the host's
    kernel-launch jitter; what such a run reports is samples per second over whole epochs."""
    name = "step_time_cv"
    walls = [float(e["wall_sec"]) for e in epochs]
    if len(walls) < 2:
        return CheckOutcome(
            name, None, "one measured epoch: pass --llmbench-epochs=2 or more to see them agree"
        )
    mean = statistics.fmean(walls)
    if mean <= 0:
        return CheckOutcome(name, None, "the epochs took no measurable time")
    cv = statistics.stdev(walls) / mean
    steps = result.get("step_time_cv")
    detail = f"CV {cv:.1%} (mean {mean:.2f} s over {len(walls)} epochs" + (
        f"; step time CV {steps:.1%}, which data arrival moves by design)" if steps is not None else ")"
    )
    return _cv_verdict(
        result,
        cv,
        max_cv,
        quantity="epoch wall time",
        detail=detail,
        fix="Add warm-up epochs (--llmbench-warmup-epochs) or samples per epoch (--llmbench-dataset-samples)",
    )


def check_repeat_spread(result: Mapping[str, Any], max_spread: float) -> CheckOutcome:
    """Repeats agree: each repeat's tokens/s within the bound of their mean (seed 001: ±5%)."""
    name = "repeat_spread"
    rep = result.get("repeats")
    if not rep or rep.get("count", 1) < 2:
        return CheckOutcome(name, None, "one run: pass --llmbench-repeat=N to measure the spread")
    rates = ", ".join(f"{r:,.1f}" for r in rep["tokens_per_sec"])
    detail = (
        f"tokens/s over {rep['count']} repeats: {rates} (mean {rep['tokens_per_sec_mean']:,.1f}, "
        f"std {rep['tokens_per_sec_std']:,.1f}); largest deviation {rep['max_deviation']:.1%}"
    )
    if rep["max_deviation"] <= max_spread:
        return CheckOutcome(name, True, f"{detail} <= {max_spread:.1%}", rep["max_deviation"], max_spread)
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: repeats disagree: {detail} > {max_spread:.1%}. Look for throttling, "
        "other jobs on the machine or a noisy interconnect; or raise --llmbench-max-repeat-spread.",
        rep["max_deviation"],
        max_spread,
    )
