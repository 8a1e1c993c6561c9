"""Runs inside each rank: strategy name -> implementation. DeepSpeed is imported only when used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Strategy

if TYPE_CHECKING:
    from ...config.spec import RunSpec


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
