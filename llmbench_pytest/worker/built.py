"""Runs inside each rank: what a model builder hands the strategies and the loop.

Its own module so that every builder (models.py for causal LMs and LoRA, seq2seq.py for the
encoder-decoder) and every strategy can name it without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch import nn

    from ..analysis.flops import FlopsModel
    from .techniques import Techniques


@dataclass
class BuiltModel:
    module: nn.Module
    loss: Callable[[nn.Module, torch.Tensor], torch.Tensor]
    """(wrapped module, input ids) -> scalar loss; the wrapped module may be DDP/FSDP/DeepSpeed."""
    vocab_size: int
    flops: FlopsModel
    block_classes: tuple[type[nn.Module], ...]
    """The repeated transformer block, the unit FSDP shards and checkpointing recomputes."""
    hidden_size: int
    summary: dict[str, Any] = field(default_factory=dict)
    techniques: Techniques | None = None
    """What techniques.apply_techniques changed (fp8, fused loss, attention), undone at close."""
