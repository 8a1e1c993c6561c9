"""The whole peak GPU memory of a run, predicted per rank before it runs. Standard library only.

A training step peaks where the forward pass ends and the loss is taken: every activation saved
for backward is alive, the loss holds fp32 logits, and no gradient of this step exists yet
(DDP's gradient buckets aside, which persist). The prediction adds, in bytes per rank:

- model states resident at that moment (`resident_bytes_per_param`): the weights each strategy
  keeps, the optimizer state (after the first step: fp32 master, Adam's two moments) and gradient
  storage that outlives a step (DDP's buckets; ZeRO-3's gradient partition, allocated when its
  optimizer is built). These are memory_model.py's states without this step's gradients;
- activations and temporaries, from one traced step of the real model (worker/step_trace.py:
  FakeTensorMode and the repository's own dispatch mode, LiveBytes, that counts every storage an
  operator creates until it is freed; torch's MemTracker is not used), in the precision the
  strategy computes in, with the adapters and the linear the GPU rank computes with
  (plan/predict.py);
- each strategy's buffers (`buffer_bytes`): FSDP's unsharded parameters (the root's during the
  loss, every block's for fsdp_grad_op, which keeps them after forward), ZeRO-3's reduce bucket
  and the parameters it still holds gathered (zero3_memory.py: from the run's own DeepSpeed
  settings and the model's modules in the order they run), the offload transfer buffer; on a GPU,
  cuBLAS's workspaces beside them (`cublas_workspace_bytes`);
- the allocator's slack: reserved = allocated x RESERVED_OVER_ALLOCATED, with memory to spare
  (near a GPU's limit the allocator hands its cache back: whether a run fits is analysis/fit.py's).

Other candidates: the start of backward, for ZeRO-1/2, which allocate their reduce buckets and
gradient partition with backward's first gradient (`backward_bytes`), after the loss's temporaries
are freed and beside nearly all activations; the optimizer step: memory_model's census at the end
of backward, less the gradients ZeRO-1's epilogue frees before it
(`memory_model.held_until_epilogue_bytes`), plus what the step allocates for itself (`step_bytes`;
ZeRO-3's, from its states, bucket and largest sub-group: zero3_memory.step_bytes); the end of
backward itself, the census whole (ZeRO-1 with overlap_comm at many ranks, where those gradients
outweigh the step's 6 bytes per parameter over N). The largest is the prediction. The step
decides the peak where activations are small (activation checkpointing, LoRA, small batches).

Validated against every GPU run in docs/results by tools/peak_table.py, which writes
docs/results/2026-11-28-peak-prediction-zero3/table.md (its README says when and at which commit).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import fit, memory_model, zero3_memory

PEAK_TOLERANCE = 0.10
"""A measured peak allocated beyond +-10% of the prediction is flagged (checks/memory.py)."""

RESERVED_OVER_ALLOCATED = 1.11
"""Reserved over allocated at the peak: the median of the 92 GPU runs in docs/results
(1.01-1.17; tools/peak_table.py prints it: 1.110 on 2026-11-25), the caching allocator's slack
and fragmentation."""

UNFIT_MARGIN = 0.10
"""A configuration whose predicted peak allocated exceeds the GPU's memory by more than this
is skipped before it runs (--llmbench-run-unfit runs it anyway)."""
UNFIT = "predicted not to fit"
"""How the refusal of such a configuration begins (worker/run.refuse_unfit); the batch search
(session/fixture.py) reads a trial refused so as a batch that does not fit."""

GB = 1e9

CUBLAS_THREADS = 2
"""Threads that run a step's matrix products: the forward's and autograd's device thread for the
backward. torch gives each (cuBLAS handle, stream), so each thread, a workspace of its own from
the caching allocator, counted in the allocated memory and kept for the process's life."""


def cublas_workspace_bytes(
    device: str, capability_major: int | None = None, config: str | None = None
) -> int:
    """The cuBLAS workspaces a training step leaves allocated on a GPU (0 elsewhere): per thread,
    what CUBLAS_WORKSPACE_CONFIG (`:SIZE_KIB:COUNT` pairs) asks, else torch's default, 32 MiB on
    compute capability 9 (Hopper) and 8,320 KiB (`:4096:2:16:8`) on the others (torch's
    CublasHandlePool.cpp; pytorch/pytorch PRs 89027 and 182669). Unknown capability: Hopper's,
    the larger. On 1-GPU runs of the tiny presets this was the whole of a 67-72 MB gap between
    the measured peak and a prediction without it (docs/results/2026-11-26-h100-gpu-tests)."""
    if device != "cuda":
        return 0
    if config:
        numbers = [int(x) for x in config.split(":") if x.strip().isdigit()]
        per_thread = sum(a * b for a, b in zip(numbers[0::2], numbers[1::2], strict=False)) * 1024
    else:
        per_thread = (4096 * 8 if capability_major in (None, 9) else 4096 * 2 + 16 * 8) * 1024
    return CUBLAS_THREADS * per_thread


@dataclass(frozen=True, slots=True)
class StepTrace:
    """What tracing one forward and backward found at its peak (worker/step_trace.py)."""

    activation_bytes: int
    temporary_bytes: int
    parameter_bytes: int
    gradient_bytes: int
    compute: str
    """amp (fp32 weights under autocast), half (16-bit weights) or fp32."""
    seconds: float
    torch: str
    params: int
    trainable: int
    largest_block: int
    """Parameters of the largest repeated block (FSDP's unit)."""
    outside_blocks: int
    """Parameters outside the blocks (embeddings, LM head, final norm): FSDP's root unit."""
    embedding: int
    cached: bool = False
    """Read from the trace cache (worker/trace_cache.py): `seconds` is the original trace's."""


METHOD = "traced step (FakeTensorMode, counted by LiveBytes dispatch) + model states + buffers"
"""What a recorded prediction says it was made by (result.json's peak_prediction.method)."""


@dataclass(frozen=True, slots=True)
class PeakPrediction:
    allocated_gb: float
    reserved_gb: float
    parts: dict[str, float]
    """GB by part: model_states, activations, temporaries, buffers."""
    phase: str
    """Where the peak is predicted: "end of forward", "end of backward" or "optimizer step"."""
    compute: str
    trace_sec: float
    step_gb: float = 0.0
    """The optimizer step's candidate (what the peak is when activations are small)."""
    trace_cached: bool = False
    """The step's trace came from the cache on disk, not from tracing in this process."""
    backward_gb: float = 0.0
    """The end of backward's candidate (memory_model's census)."""
    backward_extra_gb: float = 0.0
    """What ZeRO-1/2 allocate as backward starts (`backward_bytes`), held with the activations but
    not with the loss's temporaries: the start of backward's candidate is the end of forward's
    with the temporaries replaced by it."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "method": METHOD}

    def fits(self, device_gb: float) -> bool:
        """Whether the run fits on a GPU whose memory CUDA reports as `device_gb` (analysis/fit.py)."""
        return fit.fits(self.allocated_gb, device_gb)

    def largest_batch(self, batch: int, allocated_limit_gb: float) -> int:
        """The most sequences per rank whose predicted peak allocated stays within the limit."""
        return fit.largest_batch(
            self.parts, batch, allocated_limit_gb,
            fixed_gb=max(self.step_gb, self.backward_gb), backward_extra_gb=self.backward_extra_gb,
        )  # fmt: skip

    def clearly_unfit(self, capacity_gb: float) -> bool:
        return self.allocated_gb > capacity_gb * (1 + UNFIT_MARGIN)


def _p(dtype: str) -> int:
    return 2 if dtype in ("bf16", "fp16") else 4


def resident_bytes_per_param(
    strategy: str, offload: str, world_size: int, dtype: str, optimizer: str = "adamw_torch"
) -> float:
    """Device bytes per trained parameter at the end of forward, after the first step."""
    n, p = world_size, _p(dtype)
    adam = 2.0 if optimizer != "adamw_torch" else 8.0  # bitsandbytes' 8-bit AdamW: 2 bytes
    if strategy == "ddp":
        return 4 + 4 + adam  # fp32 weights, gradient buckets (gradient_as_bucket_view), moments
    if strategy in ("fsdp", "fsdp_grad_op"):
        return (4 + adam) / n  # fp32 shard and its moments; gradients are freed each step
    if offload != "none":
        return 0.0 if strategy == "zero3" else float(p)  # 16-bit weights stay unless ZeRO-3
    if strategy == "zero0":
        return p + 12.0  # 16-bit module, fp32 master and moments
    if strategy in ("zero1", "zero2"):
        return p + 12 / n
    return (p + 12) / n  # zero3


def frozen_bytes_per_param(strategy: str, world_size: int, dtype: str) -> float:
    """A frozen (LoRA base) weight: stored once in the run's precision, sharded where weights are."""
    return _p(dtype) / (world_size if strategy in ("fsdp", "fsdp_grad_op", "zero3") else 1)


def buffer_bytes(
    strategy: str,
    offload: str,
    world_size: int,
    dtype: str,
    trace: StepTrace,
    inflight: memory_model.InFlight,
    zero3: zero3_memory.Zero3Held | None = None,
) -> float:
    """What each strategy holds beside the states at the end of forward (module docstring);
    ZeRO-3's from `zero3` where given (analysis/zero3_memory.py), else its LM head and a prefetch
    bucket."""
    p = _p(dtype)
    if strategy == "fsdp":
        return p * trace.outside_blocks  # the root unit (embedding, LM head) is unsharded for the loss
    if strategy == "fsdp_grad_op":
        return p * trace.params  # every unit stays unsharded after forward
    if not strategy.startswith("zero") or strategy == "zero0":
        return 0.0
    bucket = inflight.bucket * (2 if inflight.overlap_comm else 1)
    if strategy == "zero3":
        return _zero3_buffer_bytes(p, offload, world_size, trace, inflight, zero3)
    if offload != "none":
        return p * (bucket + trace.embedding)  # the host transfer buffer holds the largest parameter
    return 0.0  # ZeRO-1/2 allocate their buckets with backward's first gradient (`backward_bytes`)


def _zero3_buffer_bytes(
    p: int,
    offload: str,
    world_size: int,
    trace: StepTrace,
    inflight: memory_model.InFlight,
    zero3: zero3_memory.Zero3Held | None,
) -> float:
    """ZeRO-3's reduce bucket and gathered parameters (zero3_memory.py); without its settings, the
    LM head and a prefetch bucket, gathered at 2+ ranks or with offload."""
    if zero3 is not None:
        held = zero3_memory.held_bytes(zero3, p, world_size, offload, trace.trainable)
        return held["reduce bucket"] + held["gathered parameters"]
    gathered = trace.embedding + int(0.9 * inflight.bucket) if (world_size > 1 or offload != "none") else 0
    return p * gathered


def backward_bytes(
    strategy: str, offload: str, world_size: int, dtype: str, trained: int, inflight: memory_model.InFlight
) -> float:
    """What ZeRO-1/2 (without offload) allocate when backward's first gradient is ready
    (stage_1_and_2.py: setup_buckets, copy_grads_in_partition) and free in their epilogue: the
    reduce buckets (two with overlap_comm) and the 16-bit gradient partition, where ZeRO-2, or
    ZeRO-1 with overlap_comm, reduces during backward. By then the loss's temporaries are gone
    (autograd freed them before the LM head's weight gradient was accumulated), the activations
    nearly all still held: the "start of backward" candidate."""
    if strategy not in ("zero1", "zero2") or offload != "none":
        return 0.0
    p = _p(dtype)
    buckets = p * inflight.bucket * (2 if inflight.overlap_comm else 1)
    partition = p * trained / world_size if (strategy == "zero2" or inflight.overlap_comm) else 0.0
    return buckets + partition


def step_bytes(strategy: str, offload: str, world_size: int, trained: int, largest: int) -> float:
    """What the optimizer step allocates beyond the states (measured on 1x H100, llama-1b with
    activation checkpointing at batch 4, where the step is the peak, 2026-11-25):

    - DDP: torch's foreach AdamW over plain tensors, one fp32 temporary per parameter (4 bytes;
      measured 19.061 GB, predicted 19.064);
    - FSDP: AdamW over DTensor shards goes parameter by parameter: one temporary of the largest
      (the embedding) at a time (measured 15.84 GB against 15.25 of states);
    - DeepSpeed ZeRO without offload: 6 bytes per parameter of its partition (the fp32 gradient
      partition it builds from the 16-bit gradients, and a 16-bit copy; measured 21.04 GB against
      15.40 of states at world size 1);
    - offload: the step runs on the host."""
    if offload != "none":
        return 0.0
    if strategy == "ddp":
        return 4.0 * trained
    if strategy in ("fsdp", "fsdp_grad_op"):
        return 4.0 * largest / world_size
    return 6.0 * trained / world_size


def predict(
    strategy: str,
    offload: str,
    world_size: int,
    dtype: str,
    trace: StepTrace,
    *,
    optimizer: str = "adamw_torch",
    inflight: memory_model.InFlight | None = None,
    lora: bool = False,
    workspace_bytes: int = 0,
    zero3: zero3_memory.Zero3Held | None = None,
) -> PeakPrediction:
    """The predicted peak per rank (module docstring); `workspace_bytes`: cuBLAS's
    (`cublas_workspace_bytes`), counted with the buffers; `zero3`: what DeepSpeed's ZeRO-3 holds
    by its settings (analysis/zero3_memory.py; plan/predict.py reads them from the run's config)."""
    flight = inflight or memory_model.InFlight()
    trained = trace.trainable if lora else trace.params
    frozen = trace.params - trained
    states = trained * resident_bytes_per_param(strategy, offload, world_size, dtype, optimizer)
    states += frozen * frozen_bytes_per_param(strategy, world_size, dtype)
    if strategy == "zero3" and zero3 is not None:  # its gradient partition lives as long as the states
        held = zero3_memory.held_bytes(zero3, _p(dtype), world_size, offload, trained)
        states += held["gradient partition"]
    buffers = buffer_bytes(strategy, offload, world_size, dtype, trace, flight, zero3) + workspace_bytes
    forward = states + buffers + trace.activation_bytes + trace.temporary_bytes
    extra = backward_bytes(strategy, offload, world_size, dtype, trained, flight)
    start_of_backward = forward - trace.temporary_bytes + extra
    census = memory_model.predicted_gb(
        strategy, offload, world_size, dtype, trace.params if not lora else frozen,
        trained if lora else None, optimizer=optimizer, inflight=flight,
    )  # fmt: skip
    backward = (census or 0.0) * GB + workspace_bytes
    # ZeRO-1's gradients outside its partition: in the census (never for LoRA's small adapters),
    # freed by its epilogue before the step
    freed = memory_model.held_until_epilogue_bytes(strategy, offload, world_size, dtype, flight)
    freed = 0.0 if lora else freed
    step = backward - freed + step_bytes(strategy, offload, world_size, trained, trace.embedding)
    if strategy == "zero3" and zero3 is not None and offload == "none":
        # the step starts by releasing every gathered parameter: the states, the reduce bucket
        # and the largest sub-group's gradients (zero3_memory.step_bytes)
        step = states + _p(dtype) * zero3.reduce_bucket + workspace_bytes
        step += zero3_memory.step_bytes(zero3, _p(dtype))
    parts = {
        "model_states": states / GB,
        "activations": trace.activation_bytes / GB,
        "temporaries": trace.temporary_bytes / GB,
        "buffers": buffers / GB,
    }
    candidates = {
        "end of forward": forward,
        "optimizer step": step,
        "end of backward": backward,
        "start of backward": start_of_backward,
    }
    phase = max(candidates, key=candidates.__getitem__)  # ties go to the first: forward, then step
    allocated = candidates[phase]
    return PeakPrediction(
        allocated_gb=allocated / GB,
        reserved_gb=allocated * RESERVED_OVER_ALLOCATED / GB,
        parts=parts,
        phase=phase,
        compute=trace.compute,
        trace_sec=trace.seconds,
        step_gb=step / GB,
        trace_cached=trace.cached,
        backward_gb=backward / GB,
        backward_extra_gb=extra / GB,
    )


def largest_batch(
    prediction: dict[str, Any] | None, batch: int, limit_gb: float, *, device_memory: bool = False
) -> int | None:
    """From a run's recorded prediction at `batch`: the most sequences per rank that stay within
    `limit_gb`: the GPU's memory where `device_memory` (the run must fit: analysis/fit.py), else a
    limit on reserved memory (predicted allocated x RESERVED_OVER_ALLOCATED). Activations and
    temporaries grow with the batch, states and buffers do not. None without a prediction."""
    parts = (prediction or {}).get("parts")
    if not parts or batch < 1 or parts["activations"] + parts["temporaries"] <= 0:
        return None
    allocated = fit.allocatable_gb(limit_gb) if device_memory else limit_gb / RESERVED_OVER_ALLOCATED
    fixed = max(float(prediction.get("step_gb") or 0.0), float(prediction.get("backward_gb") or 0.0))
    extra = float(prediction.get("backward_extra_gb") or 0.0)
    return max(1, fit.largest_batch(parts, batch, allocated, fixed_gb=fixed, backward_extra_gb=extra))


def gap(measured_gb: float | None, predicted_gb: float | None) -> float | None:
    """measured / predicted - 1, or None when either is missing."""
    return memory_model.gap(measured_gb, predicted_gb)
