"""Predicted model-state memory per rank, by strategy. Standard library only.

ZeRO paper (Rajbhandari et al. 2020), section 3: mixed-precision AdamW holds 2 bytes per
parameter of 16-bit weights, 2 of 16-bit gradients and K = 12 of optimizer state (fp32 master
weights, momentum, variance): 16 bytes per parameter for data parallelism. Partitioning over N
ranks leaves ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3 16/N.

The census this predicts is taken at the end of autograd's backward of one untimed step (every
gradient produced, activations freed, the optimizer step not yet run; worker/memory.py), before
any strategy code that runs after autograd returns. How the strategies map onto it:

- DDP and FSDP keep fp32 weights in the module (autocast, FSDP's MixedPrecisionPolicy): 4 + 4 + 8
  = 16 per parameter, all on every rank for DDP, sharded 16/N for FSDP (both FSDP variants
  reduce-scatter inside backward and keep only their shards). bitsandbytes' 8-bit AdamW keeps
  2 bytes of state instead of 8.
- DeepSpeed keeps an fp32 master partition in the optimizer even when the model is fp32, so with
  p = 2 (bf16/fp16) or 4 (fp32) bytes per module parameter: ZeRO-1 p + p + 12/N, ZeRO-2
  p + (p + 12)/N, ZeRO-3 (2p + 12)/N; ZeRO-0 is plain data parallelism, 16.
- What DeepSpeed still holds when autograd returns (its epilogue runs after): the gradient
  bucket it was filling (reduce_bucket_size elements; ZeRO-1/2 two of them with overlap_comm,
  ZeRO-3 one, allocated with its optimizer); a gradient larger than a bucket is reduced whole
  and the last one autograd produces, the input embedding's (vocab x hidden), waits for the
  epilogue in a tensor of its own (one that fits a bucket is copied into it: with buckets of 5e8
  elements, or of a small model's size, the census on CPU measured it so, within 0.2% at 1 and 2
  ranks for llama-tiny and mistral-tiny, where counting it apart was 3.1-5.2% over); ZeRO-3 at 2
  or more ranks also still holds that embedding's gathered weights. Measured on CPU at world
  size 2 (llama-tiny, encoder-decoder, fp32 and bf16): ZeRO-1 14.05 bytes per parameter against
  14 predicted, ZeRO-2 12.90 against 12.85, ZeRO-3 11.65 against 11.65 (fp32).
- ZeRO-1 with overlap_comm (our GPU config) reduces while backward runs, as ZeRO-2 does, and
  holds what ZeRO-2 holds plus, at 2 or more ranks, each gradient larger than a bucket that lies
  outside its partition: p x large x (N-1)/N (`InFlight.large`: the MLP matrices, the embedding
  and the LM head, with the hidden^2 bucket). DeepSpeed 0.19.8, stage_1_and_2.py: such a gradient
  is reduced where it is, not copied into the bucket (reduce_independent_p_g_buckets_and_remove_grads);
  then ZeRO-2 drops the gradients outside its partition (reduce_ipg_grads: clear_grad_attribute),
  ZeRO-1 copies its partition's and leaves the others; the epilogue frees them
  (_clear_param_grad_only), before the optimizer step. The census reports the rank that holds the
  most, the first: its partition holds the embedding (pending anyway) but not the LM head, about
  the (N-1)/N share (llama-1b's layout at 4 ranks: 1.008 GB of them there, 1.027 predicted). Measured:
  llama-1b bf16, 1x H100 (2026-11-24) 15.3996 GB, predicted 15.3994; 4x H200 host
  (2026-11-27) 9.42 GB at 2 GPUs, predicted 9.412, and 6.42 at 4, predicted 6.418; llama-tiny bf16 on
  CPU with overlap_comm forced on (gloo, 2026-11-27) 13.643 MB at 2 ranks, predicted 13.609, and
  9.493 at 4, predicted 9.493.
- CPU offload moves the optimizer state and the gradient partitions to host memory. ZeRO-1/2
  keep the p bytes of 16-bit weights on the device, plus a transfer buffer the size of the
  largest parameter (the embedding's, vocab x hidden) and what is in flight as for ZeRO-2 (the
  bucket, double-buffered with overlap_comm, and the embedding's gradient); on the host the fp32
  master, the Adam moments and fp32 gradients (16 bytes) and a 16-bit copy of the partition (p),
  all over N, and a p-byte embedding buffer. ZeRO-3 offload keeps its parameters on the host too:
  on the device one bucket and the embedding's gathered weights and gradient (2p x vocab x
  hidden); on the host 16 + 2p bytes per parameter over N. Measured on 1x H100 (llama-1b, bf16,
  census at the end of backward, 2026-11-24): zero1_offload and zero2_offload 2.1855 GB device
  (2.1854 predicted) and 17.303 GB host (17.289 predicted plus 0.014 GB of pinned input
  batches); zero3_offload 0.2708 GB device (0.2705) and 19.067 GB host (19.065). On a CPU the
  device is the host: the offloaded states are in the same census, and no device share is
  predicted.
The census (measured) and this prediction are reported side by side; checks/memory.py holds each
run to it (MODEL_STATE_TOLERANCE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

GAP_FLAG = 0.25
"""Relative gap between measured and predicted above which the report flags a run."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """What DeepSpeed has not yet reduced or released when autograd's backward returns."""

    embedding: int = 0
    """Parameters of the input embedding (vocab x hidden), whose gradient autograd produces last."""
    bucket: int = 0
    """DeepSpeed's reduce_bucket_size, in elements."""
    overlap_comm: bool = False
    """DeepSpeed reduces gradients while backward runs (overlap_comm)."""
    large: int = 0
    """Trained parameters in tensors larger than a bucket (`large_params`), whose gradients
    DeepSpeed reduces one by one, outside the bucket."""

    @classmethod
    def of(cls, model_info: Mapping[str, Any], strategy_config: Mapping[str, Any]) -> InFlight:
        """From a result's model_info and strategy_config (DeepSpeed's zero_optimization); `large`
        as the strategy counted it (strategy_config's params_above_bucket) where it did, else
        estimated from the shapes model_info records."""
        zero = (strategy_config.get("deepspeed_config") or {}).get("zero_optimization") or {}
        vocab, hidden = model_info.get("vocab_size"), model_info.get("hidden_size")
        bucket = int(zero.get("reduce_bucket_size") or 0)
        counted = strategy_config.get("params_above_bucket")
        return cls(
            embedding=int(vocab) * int(hidden) if vocab and hidden else 0,
            bucket=bucket,
            overlap_comm=bool(zero.get("overlap_comm")),
            large=int(counted) if counted is not None else large_params(model_info, bucket),
        )


def large_params(model_info: Mapping[str, Any], bucket: int) -> int:
    """Parameters in tensors larger than `bucket` elements, from the shapes worker/models.py records
    (params, layers, hidden_size, heads, head_dim): all but each block's four attention projections
    (hidden x heads*head_dim each; the bucket DeepSpeed's config sizes, hidden^2, holds one) and
    its two norms, and the final norm. Exact for the llama presets (llama-1b: 684,720,128 of
    953,223,168). Short where attention is one fused tensor larger than the bucket, or k and v are
    smaller (grouped-query attention): by 18% of gpt2's 117.2M, 14% of mistral-7b's 5.91B, 13% of
    encdec-50m's 46.7M (counted on the meta device, 2026-11-27), which leaves ZeRO-1's prediction
    1.1-1.6% short at 2 ranks and 3.7-4.9% at 8 for those models. 0 where a shape is missing."""
    keys = ("params", "layers", "hidden_size", "heads", "head_dim")
    params, layers, hidden, heads, head_dim = (int(model_info.get(k) or 0) for k in keys)
    if not (bucket and params and layers and hidden and heads and head_dim):
        return 0
    projection = hidden * heads * head_dim
    norms = (2 * layers + 1) * hidden
    small = norms + (4 * layers * projection if projection <= bucket else 0)
    return max(0, params - small)


def bytes_per_param(  # noqa: PLR0911 (one return per strategy reads as the table it is)
    strategy: str,
    offload: str,
    world_size: int,
    dtype: str,
    *,
    overlap_comm: bool = False,
    device: str = "cuda",
) -> float | None:
    """Device bytes per parameter for model states at the end of backward, before the optimizer step."""
    n = world_size
    p = 2 if dtype in ("bf16", "fp16") else 4
    if offload != "none" and device != "cuda":
        return None  # on a CPU the offloaded states stay in the same memory as the rest
    if strategy in ("ddp", "zero0"):
        return 16.0
    if strategy in ("fsdp", "fsdp_grad_op"):
        return 16.0 / n
    if strategy in ("zero1", "zero2") and offload == "cpu":
        return float(p)  # gradient partitions go to pinned host buffers with the optimizer state
    if strategy == "zero3" and offload != "none":
        return 0.0  # parameters live on the host (or NVMe) too: only what is in flight is here
    if strategy == "zero1" and not overlap_comm:
        return p + p + 12 / n
    if strategy in ("zero1", "zero2"):  # ZeRO-1 with overlap_comm partitions gradients too
        return p + (p + 12) / n
    if strategy == "zero3" and offload == "none":
        return (2 * p + 12) / n
    return None


def _in_flight_bytes(
    strategy: str, offload: str, world_size: int, dtype: str, inflight: InFlight, embedding_trains: bool
) -> float:
    """Bytes DeepSpeed still holds when autograd returns (see the module docstring)."""
    if not strategy.startswith("zero") or strategy == "zero0":
        return 0.0
    p = 2 if dtype in ("bf16", "fp16") else 4
    if offload != "none":
        return _offload_in_flight(strategy, p, inflight, embedding_trains)
    # ZeRO-1/2 double-buffer their bucket with overlap_comm (stage_1_and_2.setup_buckets); ZeRO-3
    # keeps one (stage3.py: one buffer per communication dtype)
    buckets = 2 if inflight.overlap_comm and strategy != "zero3" else 1
    out = p * inflight.bucket * buckets
    if not embedding_trains:
        return out  # a frozen embedding has no gradient to wait for, nor weights ZeRO-3 keeps
    grad = p * inflight.embedding if _grad_apart(inflight) else 0.0
    if strategy in ("zero2", "zero1") and (strategy == "zero2" or inflight.overlap_comm):
        out += grad
    out += held_until_epilogue_bytes(strategy, offload, world_size, dtype, inflight)
    if strategy == "zero3":
        # its gradient, and at 2+ ranks the weights gathered from the shards (one rank owns them whole)
        out += grad + (p * inflight.embedding if world_size > 1 else 0)
    return out


def _grad_apart(inflight: InFlight) -> bool:
    """The embedding's gradient waits for the epilogue in a tensor of its own where it is larger
    than a bucket; one that fits is copied into the bucket (stage_1_and_2.py and stage3.py: a
    gradient goes into the contiguous bucket when it has space for it), which is counted."""
    return not inflight.bucket or inflight.embedding > inflight.bucket


def held_until_epilogue_bytes(
    strategy: str, offload: str, world_size: int, dtype: str, inflight: InFlight
) -> float:
    """ZeRO-1 with overlap_comm: the gradients larger than a bucket outside this rank's partition,
    kept whole until its epilogue frees them, before the optimizer step (module docstring)."""
    if strategy != "zero1" or offload != "none" or not inflight.overlap_comm:
        return 0.0
    p = 2 if dtype in ("bf16", "fp16") else 4
    return p * inflight.large * (world_size - 1) / world_size


def _offload_in_flight(strategy: str, p: int, inflight: InFlight, embedding_trains: bool) -> float:
    """What an offloading ZeRO holds on the device besides its resident weights (docstring)."""
    grad = p * inflight.embedding if embedding_trains and _grad_apart(inflight) else 0
    if strategy == "zero3":  # the embedding gathered, and its gradient
        return p * inflight.bucket + (p * inflight.embedding if embedding_trains else 0) + grad
    buckets = p * inflight.bucket * (2 if inflight.overlap_comm else 1)
    return buckets + grad + p * inflight.embedding  # the last: the transfer buffer


def predicted_host_gb(
    strategy: str,
    offload: str,
    world_size: int,
    dtype: str,
    params: int | None,
    *,
    inflight: InFlight | None = None,
    device: str = "cuda",
) -> float | None:
    """Model states an offloading ZeRO keeps in host memory per rank, in GB (docstring); None for
    the strategies that keep none there, for NVMe (its states are on disk) and on a CPU."""
    if offload != "cpu" or device != "cuda" or not params or not strategy.startswith("zero"):
        return None
    p = 2 if dtype in ("bf16", "fp16") else 4
    embedding = (inflight or InFlight()).embedding
    if strategy == "zero3":
        return (16 + 2 * p) * params / world_size / 1e9
    return ((16 + p) * params / world_size + p * embedding) / 1e9


def predicted_gb(
    strategy: str,
    offload: str,
    world_size: int,
    dtype: str,
    params: int | None,
    trainable: int | None = None,
    *,
    optimizer: str = "adamw_torch",
    inflight: InFlight | None = None,
    device: str = "cuda",
) -> float | None:
    """Model states per rank in GB at the end of backward.

    With `trainable` (LoRA), `params` are the frozen base weights and `trainable` the adapters
    added to them (as worker/models.build_lora counts them): the frozen weights hold only
    themselves, in the run's 16-bit precision (fp32 in an fp32 run), sharded where the strategy
    shards parameters; the adapters follow the strategy's bytes per parameter."""
    flight = inflight or InFlight()
    per = bytes_per_param(
        strategy, offload, world_size, dtype, overlap_comm=flight.overlap_comm, device=device
    )
    if per is None or not params:
        return None
    if optimizer != "adamw_torch":
        if not strategy.startswith(("ddp", "fsdp")):
            return None  # DeepSpeed around a client 8-bit optimizer: not measured yet
        per -= 6.0 / (world_size if strategy.startswith("fsdp") else 1)  # 2 bytes of 8-bit state, not 8
    trained = params if trainable is None else trainable
    frozen = 0 if trainable is None else params
    weight_bytes = 2 if dtype in ("bf16", "fp16") else 4
    shards_weights = strategy in ("fsdp", "zero3")
    frozen_bytes = frozen * weight_bytes / (world_size if shards_weights else 1)
    extra = _in_flight_bytes(strategy, offload, world_size, dtype, flight, embedding_trains=trainable is None)
    return (per * trained + frozen_bytes + extra) / 1e9


def gap(measured_gb: float | None, predicted: float | None) -> float | None:
    """measured / predicted - 1, or None when either is missing."""
    if measured_gb is None or not predicted:
        return None
    return measured_gb / predicted - 1
