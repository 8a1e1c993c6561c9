"""Runs inside each rank: DistributedDataParallel, every rank holding all model states."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.parallel import DistributedDataParallel

from ...config.strategy_settings import DEFAULT, ddp_bucket_mb
from ..techniques import close_techniques
from .base import autocast, compile_blocks, make_optimizer, optimizer_kind
from .lr_schedule import LrSchedule

if TYPE_CHECKING:
    from ...config.spec import RunSpec
    from ..built import BuiltModel
    from ..dist import DistContext


class DDPStrategy:
    def setup(self, built: BuiltModel, spec: RunSpec, ctx: DistContext) -> None:
        self.built, self.spec, self.device = built, spec, ctx.device
        self.compiled = compile_blocks(built) if spec.compile else 0
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        self.bucket_mb = ddp_bucket_mb(spec.ddp_bucket_mb)
        # gradients live in the all-reduce buckets instead of beside them: one copy, not two
        self.model = DistributedDataParallel(
            built.module, device_ids=device_ids, gradient_as_bucket_view=True, bucket_cap_mb=self.bucket_mb
        )
        self.optimizer = make_optimizer(self.model.parameters(), spec, ctx.device)
        self.lr = LrSchedule(self.optimizer, spec.lr, spec.lr_warmup)
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none
        self.scaler = torch.amp.GradScaler(ctx.device.type) if spec.dtype == "fp16" else None

    def micro_step(self, input_ids: torch.Tensor, last: bool) -> torch.Tensor:
        sync = contextlib.nullcontext() if last else self.model.no_sync()
        with sync:
            with autocast(self.spec, self.device):
                loss = self.built.loss(self.model, input_ids)
            scaled = loss / self.spec.grad_accum
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach()

    def optimizer_step(self) -> None:
        self.lr.before_update()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def describe(self) -> dict[str, Any]:
        return {
            "wrapper": "torch.nn.parallel.DistributedDataParallel",
            "gradient_as_bucket_view": True,
            "mixed_precision": f"autocast({self.spec.dtype}), fp32 master weights"
            if self.spec.dtype != "fp32"
            else "none",
            "loss_scaling": "torch.amp.GradScaler" if self.scaler else None,
            "optimizer": optimizer_kind(self.spec, self.device),
            "learning_rate": self.lr.describe(),
            "compiled_blocks": self.compiled,
            "settings": {
                "bucket_cap_mb": {
                    "value": self.bucket_mb,
                    "from": "default" if self.spec.ddp_bucket_mb == DEFAULT else "axis",
                }
            },
        }

    def close(self) -> None:
        close_techniques(getattr(self, "built", None))
        self.model = self.optimizer = None  # type: ignore[assignment]
