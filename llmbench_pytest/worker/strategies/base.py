"""Runs inside each rank: the one small interface every distributed strategy implements.

A strategy wraps a built model for data-parallel training, runs one micro-step (forward and
backward on one micro-batch) and one optimizer step, and describes what it did. The timed loop
knows nothing else about it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ...config.learning_rate import ADAM_BETAS

if TYPE_CHECKING:
    from ...config.spec import RunSpec
    from ..built import BuiltModel
    from ..dist import DistContext

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Strategy(Protocol):
    def setup(self, built: BuiltModel, spec: RunSpec, ctx: DistContext) -> None:
        """Wrap the model and build its optimizer. Collective: every rank calls it."""

    def micro_step(self, input_ids: torch.Tensor, last: bool) -> torch.Tensor:
        """Forward and backward on one micro-batch; returns the detached, unscaled loss.

        `last` is False for the micro-steps of gradient accumulation that need no gradient sync.
        """

    def optimizer_step(self) -> None:
        """Apply the accumulated gradients and clear them."""

    def describe(self) -> dict[str, Any]:
        """What was configured (wrapping, precision, the DeepSpeed config), for result.json."""

    def close(self) -> None:
        """Release hooks and buffers so the next run in this process starts clean."""


def autocast(spec: RunSpec, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Mixed precision for strategies that keep fp32 master weights in the module (DDP)."""
    if spec.dtype not in AMP_DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AMP_DTYPES[spec.dtype])


def make_optimizer(params: Any, spec: RunSpec, device: torch.device) -> torch.optim.Optimizer:
    """The run's optimizer over the parameters that train (LoRA freezes the rest): torch's AdamW as
    a user would pick it (the fused CUDA kernel on GPU, foreach on CPU), or bitsandbytes' paged
    8-bit AdamW (the LoRA fine-tuning guide's choice), whose state pages to host memory under
    pressure."""
    trainable = [p for p in params if p.requires_grad]
    if spec.optimizer == "paged_adamw_8bit":
        import bitsandbytes as bnb

        return bnb.optim.PagedAdamW8bit(trainable, lr=spec.lr, betas=ADAM_BETAS, weight_decay=0.0)
    impl = {"fused": True} if device.type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(trainable, lr=spec.lr, betas=ADAM_BETAS, weight_decay=0.0, **impl)


def compile_blocks(built: BuiltModel) -> int:
    """torch.compile every transformer block in place, before any wrapping (torchtitan's
    per-block compile): one graph per block shape, compiled once and reused by every layer, and
    the strategy's hooks between blocks stay outside the graphs."""
    blocks = [m for m in built.module.modules() if isinstance(m, built.block_classes)]
    for block in blocks:
        block.compile()
    return len(blocks)


def optimizer_kind(spec: RunSpec, device: torch.device) -> str:
    if spec.optimizer == "paged_adamw_8bit":
        return "bitsandbytes.optim.PagedAdamW8bit"
    return "torch.optim.AdamW(fused)" if device.type == "cuda" else "torch.optim.AdamW(foreach)"
