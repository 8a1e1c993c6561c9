"""The benchmark card: the loss trends downward over the measured steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analysis.stats import third_means
from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping


def check_loss_falls(result: Mapping[str, Any]) -> CheckOutcome:
    """Loss trends down over the measured steps: the last third's mean below the first third's."""
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
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: loss did not fall: {detail}. Training is not learning: check the "
        "learning rate (--llmbench-lr), the precision (--llmbench-dtype) and the strategy's optimizer.",
        last,
        first,
    )
