"""The benchmark card: the loss trends downward over the measured steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analysis.stats import third_means
from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping


MIN_STEPS_TO_FAIL = 6
"""Fewer measured steps whose loss rose give no verdict: llama-1b from its initialisation at the
default learning rate rises for its first steps (10.3 to 19.8 over a 3-step zero3_nvme window after
one warm-up step, 10.8 to 14.4 over ZeRO-3's three warm-up steps, 2x H200, 2026-11-27) and falls
after; 6 is the adaptive window's least on a CPU (10 on a GPU)."""


def check_loss_falls(result: Mapping[str, Any]) -> CheckOutcome:
    """Loss trends down over the measured steps: the last third's mean below the first third's (a
    rise over fewer than MIN_STEPS_TO_FAIL steps gives no verdict)."""
    name = "loss_falls"
    losses = result.get("losses") or []
    if len(losses) < 2:
        return CheckOutcome(name, None, f"{len(losses)} measured step(s): need 2 or more to see a trend")
    first, last = third_means(losses)
    detail = (
        f"mean loss of the first third {first:.4f}, of the last third {last:.4f} over {len(losses)} steps"
    )
    if last < first:
        return CheckOutcome(name, True, f"loss falls: {detail}", last, first)
    if len(losses) < MIN_STEPS_TO_FAIL:
        return CheckOutcome(
            name,
            None,
            f"loss did not fall: {detail}. No verdict from fewer than {MIN_STEPS_TO_FAIL} steps: a model's "
            "loss from its initialisation can rise for its first steps before it falls; measure more "
            f"(--llmbench-steps={MIN_STEPS_TO_FAIL} or more) to tell",
            last,
            first,
        )
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: loss did not fall: {detail}. Training is not learning: check the "
        "learning rate (--llmbench-lr), the precision (--llmbench-dtype) and the strategy's optimizer.",
        last,
        first,
    )
