"""Runs inside each rank: FSDP2 (torch.distributed.fsdp.fully_shard), one unit per block, then
the root (fully_shard's documented pattern, as torchtitan wraps a llama).

`fsdp` reshards parameters after forward (ZeRO-3-like: parameters, gradients and optimizer
state sharded). `fsdp_grad_op` keeps the gathered parameters from forward to backward, so
only gradients and optimizer state stay sharded (ZeRO-2-like, the old SHARD_GRAD_OP).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

from ..techniques import close_techniques
from .base import AMP_DTYPES, compile_blocks, make_optimizer, optimizer_kind
from .lr_schedule import LrSchedule

if TYPE_CHECKING:
    from ...config.spec import RunSpec
    from ..built import BuiltModel
    from ..dist import DistContext


class FSDPStrategy:
    def __init__(self, reshard_after_forward: bool) -> None:
        self.reshard_after_forward = reshard_after_forward

    def setup(self, built: BuiltModel, spec: RunSpec, ctx: DistContext) -> None:
        self.built, self.spec, self.device = built, spec, ctx.device
        self.compiled = compile_blocks(built) if spec.compile else 0
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        policy = MixedPrecisionPolicy()
        if spec.dtype in AMP_DTYPES:
            # compute in bf16, reduce gradients and keep master weights in fp32
            policy = MixedPrecisionPolicy(param_dtype=AMP_DTYPES[spec.dtype], reduce_dtype=torch.float32)
        module = built.module
        blocks = [m for m in module.modules() if isinstance(m, built.block_classes)]
        for block in blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=self.reshard_after_forward, mp_policy=policy)
        # the root unit (embedding, final norm, LM head) stays gathered from forward to backward,
        # which needs it first: fully_shard's documentation, "For best performance, we usually set
        # False for the root module"; resharding it re-gathered the embedding and LM head at once
        fully_shard(module, mesh=mesh, reshard_after_forward=False, mp_policy=policy)
        self.units = len(blocks) + 1
        self.model = module
        self.optimizer = make_optimizer(module.parameters(), spec, ctx.device)
        self.lr = LrSchedule(self.optimizer, spec.lr, spec.lr_warmup)
        # fp16 needs loss scaling; the sharded scaler all-reduces "found inf" so that every rank
        # skips the same steps (each rank only sees its own gradient shard)
        self.scaler = ShardedGradScaler(ctx.device.type) if spec.dtype == "fp16" else None

    def micro_step(self, input_ids: torch.Tensor, last: bool) -> torch.Tensor:
        # accumulation micro-steps keep unsharded gradients locally and reduce-scatter once
        self.model.set_requires_gradient_sync(last)
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
        if self.built.techniques is not None:
            self.built.techniques.after_optimizer_step(self.model)  # fp8 all-gather: the new scales
        self.optimizer.zero_grad(set_to_none=True)

    def describe(self) -> dict[str, Any]:
        return {
            "wrapper": "torch.distributed.fsdp.fully_shard",
            "reshard_after_forward": self.reshard_after_forward,
            "sharded_units": self.units,
            "mixed_precision": f"param {self.spec.dtype}, reduce fp32, fp32 master weights"
            if self.spec.dtype != "fp32"
            else "none",
            "loss_scaling": "ShardedGradScaler" if self.scaler else None,
            "optimizer": optimizer_kind(self.spec, self.device),
            "learning_rate": self.lr.describe(),
            "compiled_blocks": self.compiled,
            # the pair fsdp / fsdp_grad_op is the blocks' setting swept; the root never reshards
            "settings": {
                "reshard_after_forward": {"value": self.reshard_after_forward, "from": "strategy"},
                "root_reshard_after_forward": {"value": False, "from": "default"},
            },
        }

    def close(self) -> None:
        close_techniques(getattr(self, "built", None))
        self.model = self.optimizer = None  # type: ignore[assignment]
