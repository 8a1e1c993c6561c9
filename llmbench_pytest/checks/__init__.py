"""The validation checks, as functions over result documents. Standard library only.

One module per check family: memory.py (the limit; model states against their prediction),
variance.py (between runs; how well a run's mean is known; repeats), loss.py (loss falls),
sharding.py (the benchmark card's order of peak memory between strategies), scaling.py (throughput
against a smaller world size), timing.py (events agree with the host clock); smoke.py says which
verdicts a CPU run supports. Each returns a CheckOutcome (outcome.py) whose message shows the
numbers and, when it fails, what to change; `passed` is None, with the reason, when a check does not
apply. The fixture records every outcome in result.json and then fails the test with all failed
messages.
"""

from __future__ import annotations

from .loss import check_loss_falls
from .memory import MODEL_STATE_TOLERANCE, check_memory, check_model_states, check_peak_prediction
from .outcome import CheckOutcome
from .scaling import check_scaling
from .sharding import BELOW_DDP_MARGIN, FSDP_BELOW_ZERO3, SHARDING_ORDER, check_sharding, peer_key
from .smoke import CPU_CAVEAT, CPU_SMOKE
from .timing import TIMING_AGREEMENT, check_timing
from .variance import MIN_EPOCHS, check_mean_interval, check_repeat_spread, check_step_time_cv

CHECKS = (
    "memory",
    "model_states",
    "peak_prediction",
    "step_time_cv",
    "mean_interval",
    "loss_falls",
    "sharding",
    "scaling",
    "repeat_spread",
    "timing",
)
"""The names `llmbench.validate(result, [...])` accepts, in the order they run."""

__all__ = [
    "BELOW_DDP_MARGIN",
    "CHECKS",
    "CPU_CAVEAT",
    "CPU_SMOKE",
    "FSDP_BELOW_ZERO3",
    "MIN_EPOCHS",
    "MODEL_STATE_TOLERANCE",
    "SHARDING_ORDER",
    "TIMING_AGREEMENT",
    "CheckOutcome",
    "check_loss_falls",
    "check_mean_interval",
    "check_memory",
    "check_model_states",
    "check_peak_prediction",
    "check_repeat_spread",
    "check_scaling",
    "check_sharding",
    "check_step_time_cv",
    "check_timing",
    "peer_key",
]
