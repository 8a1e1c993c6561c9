"""Runs inside each rank: strategy name -> implementation. DeepSpeed is imported only when used."""

from __future__ import annotations

from ...spec import RunSpec
from .base import Strategy


def make_strategy(spec: RunSpec) -> Strategy:
    family = spec.info.family
    if family == "ddp":
        from .ddp import DDPStrategy

        return DDPStrategy()
    if family == "fsdp":
        from .fsdp import FSDPStrategy

        return FSDPStrategy(reshard_after_forward=spec.strategy == "fsdp")
    from .deepspeed_zero import DeepSpeedStrategy

    return DeepSpeedStrategy()


__all__ = ["Strategy", "make_strategy"]
