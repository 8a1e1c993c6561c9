"""The seeds' validation checks, as functions over result documents. Standard library only.

One module per check family: memory.py (the limit), variance.py (step time and repeats),
loss.py (loss falls), sharding.py (memory per rank follows the strategy), timing.py (events
agree with the host clock). Each returns a CheckOutcome (outcome.py) whose message shows the
numbers and, when it fails, what to change; `passed` is None when a check does not apply. The
fixture records every outcome in result.json and then fails the test with all failed messages.
"""

from __future__ import annotations

from .loss import check_loss_falls
from .memory import check_memory
from .outcome import CheckOutcome
from .sharding import SHARDING_ORDER, STRICT_MARGIN, check_sharding, peer_key
from .timing import TIMING_AGREEMENT, check_timing
from .variance import check_repeat_spread, check_step_time_cv

CHECKS = ("memory", "step_time_cv", "loss_falls", "sharding", "repeat_spread", "timing")
"""The names `llmbench.validate(result, [...])` accepts, in the order they run."""

__all__ = [
    "CHECKS",
    "SHARDING_ORDER",
    "STRICT_MARGIN",
    "TIMING_AGREEMENT",
    "CheckOutcome",
    "check_loss_falls",
    "check_memory",
    "check_repeat_spread",
    "check_sharding",
    "check_step_time_cv",
    "check_timing",
    "peer_key",
]
