"""Predicted model-state memory per rank, by strategy. Standard library only.

ZeRO paper (Rajbhandari et al. 2020), section 3: mixed-precision AdamW holds 2 bytes per
parameter of 16-bit weights, 2 of 16-bit gradients and K = 12 of optimizer state (fp32 master
weights, momentum, variance): 16 bytes per parameter for data parallelism. Partitioning over N
ranks leaves ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3 16/N.

How the strategies here map onto it:
- DDP and FSDP keep fp32 weights in the module (autocast, FSDP's MixedPrecisionPolicy): 4 + 4 + 8
  = 16 per parameter, all on every rank for DDP, sharded 16/N for FSDP (after backward both FSDP
  variants hold only their shards).
- DeepSpeed keeps an fp32 master partition in the optimizer even when the model is fp32, so with
  p = 2 (bf16/fp16) or 4 (fp32) bytes per module parameter: ZeRO-1 p + p + 12/N, ZeRO-2
  p + (p + 12)/N, ZeRO-3 (2p + 12)/N; ZeRO-0 is plain data parallelism, 16.
- CPU offload moves the optimizer state and the gradient partitions to host memory, so ZeRO-1/2
  keep only the p bytes of 16-bit weights on the device (measured on 2x H200: 2.04 GB for 0.95B
  parameters); ZeRO-3 offload streams parameters in, so it has no steady device share to predict.
The census (measured) and this prediction are reported side by side; a large gap is flagged.
"""

from __future__ import annotations

GAP_FLAG = 0.25
"""Relative gap between measured and predicted above which the report flags a run."""


def bytes_per_param(  # noqa: PLR0911 (one return per strategy reads as the table it is)
    strategy: str, offload: str, world_size: int, dtype: str
) -> float | None:
    """Device bytes per parameter for model states after backward, before the optimizer step."""
    n = world_size
    p = 2 if dtype in ("bf16", "fp16") else 4
    if strategy in ("ddp", "zero0"):
        return 16.0
    if strategy in ("fsdp", "fsdp_grad_op"):
        return 16.0 / n
    if strategy in ("zero1", "zero2") and offload == "cpu":
        return float(p)  # gradient partitions go to pinned host buffers with the optimizer state
    if strategy == "zero1":
        return p + p + 12 / n
    if strategy == "zero2":
        return p + (p + 12) / n
    if strategy == "zero3" and offload == "none":
        return (2 * p + 12) / n
    return None


def predicted_gb(
    strategy: str,
    offload: str,
    world_size: int,
    dtype: str,
    params: int | None,
    trainable: int | None = None,
) -> float | None:
    """Model states per rank in GB. With `trainable` below `params` (LoRA), the frozen weights
    hold only themselves, in the run's 16-bit precision (fp32 in an fp32 run), sharded where the
    strategy shards parameters; the trained ones follow the strategy's bytes per parameter."""
    per = bytes_per_param(strategy, offload, world_size, dtype)
    if per is None or not params:
        return None
    trained = params if trainable is None else trainable
    frozen = params - trained
    weight_bytes = 2 if dtype in ("bf16", "fp16") else 4
    shards_weights = strategy in ("fsdp", "zero3")
    frozen_bytes = frozen * weight_bytes / (world_size if shards_weights else 1)
    return (per * trained + frozen_bytes) / 1e9


def gap(measured_gb: float | None, predicted: float | None) -> float | None:
    """measured / predicted - 1, or None when either is missing."""
    if measured_gb is None or not predicted:
        return None
    return measured_gb / predicted - 1
