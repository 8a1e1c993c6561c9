"""Runs inside each rank: the learning rate of each optimizer update, the same under every strategy.

Each strategy calls `before_update()` before it applies an update; the rate it sets on the
optimizer's parameter groups follows config/learning_rate.lr_at (a linear warm-up to the peak).
DeepSpeed's optimizers wrap a torch optimizer and expose its groups (ZeRO-1/2/3, fp16) or hold it
as `.optimizer` (bf16): the rate is set on the groups the stepping optimizer reads. A user's own
DeepSpeed config that names a "scheduler" keeps it: DeepSpeed steps that one, and this one stands
aside (the strategy passes `enabled=False`).
"""

from __future__ import annotations

from typing import Any

from ...config.learning_rate import lr_at


def param_groups_of(optimizer: Any) -> list[dict[str, Any]]:
    """The parameter groups whose "lr" the stepping optimizer reads."""
    seen = optimizer
    while not hasattr(seen, "param_groups"):
        seen = getattr(seen, "optimizer", None)
        if seen is None:
            raise TypeError(
                f"{type(optimizer).__name__} exposes no parameter groups to set a learning rate on"
            )
    return list(seen.param_groups)


class LrSchedule:
    def __init__(self, optimizer: Any, peak: float, warmup: int, enabled: bool = True) -> None:
        self.groups = param_groups_of(optimizer) if enabled else []
        self.peak, self.warmup, self.enabled = peak, warmup, enabled
        self.updates = 0

    def before_update(self) -> None:
        if not self.enabled:
            return
        self.updates += 1
        lr = lr_at(self.peak, self.warmup, self.updates)
        for group in self.groups:
            group["lr"] = lr

    def describe(self) -> dict[str, Any]:
        """For result.json: the schedule the run's updates follow (update n at lr_at(peak, warmup, n))."""
        if not self.enabled:
            return {"schedule": "the DeepSpeed config's own scheduler"}
        kind = "linear warm-up" if self.warmup else "constant"
        return {"schedule": kind, "peak": self.peak, "warmup_updates": self.warmup}
