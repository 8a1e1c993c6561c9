"""Runs inside a fresh GPU rank: the run's attention kernels made ready while the rank imports.

On an H100 a causal LM's SDPA runs on cuDNN, whose attention kernels are compiled at run time and
handed to the driver as PTX; the driver compiles that for the GPU the first time it sees it (and
keeps the result in its on-disk cache, ~/.nv/ComputeCache). On a new host the session's first
configuration paid that inside its first warm-up step: 2.13 s against 0.83 s after the same
attention ran alone first, and 0.57 s with the flash backend, whose kernels are prebuilt (the cache
then held 4 KB, against 780 KB). tools/gpu/first_step.py, 1x H100, 2026-11-26,
docs/results/2026-11-26-h100-pretrain-fresh-host-5.

So a fresh rank runs one forward and backward of that attention, at the model's heads, head size,
sequence length, batch and precision, in a thread while its main thread imports transformers and
DeepSpeed (4.3-5.0 s on those hosts): the compile happens inside CUDA calls that release the GIL.
On four new hosts the thread took 1.8-2.0 s, the imports never waited for it, and the first step
took 0.78-0.85 s (the first configuration's two warm-up steps 1.1-1.3 s, against 2.3 s before).
The thread is joined, and what it allocated returned, before the rank takes its fresh memory level;
nothing it does changes a measurement (no random draws, no process-wide switch). A failure here is
only logged: the first step then compiles as it always did.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .device_init import HALF_DTYPES

if TYPE_CHECKING:
    import logging
    from collections.abc import Iterator

    from ..config.presets import ModelPreset
    from ..config.spec import RunSpec

_CUDNN_CHOICES = ("default", "cudnn")
"""--llmbench-attention values that may run on cuDNN (flash, efficient, math and fa2 ship compiled)."""


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    heads: int
    kv_heads: int
    seq_len: int
    head_dim: int

    def inputs(self, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
        """Query, key and value laid out as a transformers decoder hands them to SDPA: projected
        as (batch, sequence, heads, head size), then viewed with the heads first. The values are
        constant: nothing is drawn from the device's generator, which seeds the model's weights."""
        sizes = (self.heads, self.kv_heads, self.kv_heads)
        return [
            torch.full((self.batch, self.seq_len, h, self.head_dim), 0.01, dtype=dtype, device=device)
            .transpose(1, 2)
            .requires_grad_()
            for h in sizes
        ]


def attention_shape(spec: RunSpec, config: dict[str, Any]) -> AttentionShape | None:
    """The model's self-attention as SDPA sees it; None where this run has no cuDNN attention to
    compile ahead (a CPU, fp32, another backend, the encoder-decoder)."""
    if spec.workload not in ("causal_lm", "lora") or spec.attention not in _CUDNN_CHOICES:
        return None
    if spec.dtype not in HALF_DTYPES:  # cuDNN's attention is half precision only: fp32 compiles none of it
        return None
    heads = config.get("num_attention_heads", config.get("n_head"))
    hidden = config.get("hidden_size", config.get("n_embd"))
    head_dim = config.get("head_dim") or (hidden // heads if heads and hidden else None)
    if not heads or not head_dim:
        return None
    kv_heads = config.get("num_key_value_heads") or heads
    return AttentionShape(spec.per_device_batch, int(heads), int(kv_heads), spec.seq_len, int(head_dim))


def _attend(shape: AttentionShape, dtype: torch.dtype, device: torch.device, out: dict) -> None:
    started = time.perf_counter()
    try:
        with torch.cuda.device(device):  # the current device is per thread: this one starts at 0
            q, k, v = shape.inputs(dtype, device)
            # as transformers' SDPA path calls it on a GPU with no mask (sdpa_attention.use_gqa_in_sdpa)
            attended = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True
            )
            attended.sum().backward()
            torch.cuda.synchronize(device)
    except Exception as exc:  # a warm-up that fails leaves the first step as it was
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["sec"] = time.perf_counter() - started


@contextlib.contextmanager
def attention_ready(
    spec: RunSpec, preset: ModelPreset, device: torch.device, phases: dict[str, float], log: logging.Logger
) -> Iterator[None]:
    """Compile the run's attention on `device` while the body runs (a fresh rank's imports).
    `phases` gets attention_warmup_sec (the thread's own time) and attention_join_sec (what the
    body then waited for it); a failed warm-up is logged, and its time is not recorded."""
    shape = attention_shape(spec, preset.config) if device.type == "cuda" else None
    if shape is None:
        yield
        return
    out: dict[str, Any] = {}
    thread = threading.Thread(
        target=_attend,
        args=(shape, HALF_DTYPES[spec.dtype], device, out),
        name="llmbench-attention-warmup",
        daemon=True,
    )
    thread.start()
    try:
        yield
    finally:
        waited = time.perf_counter()
        thread.join()
        phases["attention_join_sec"] = time.perf_counter() - waited
        torch.cuda.empty_cache()  # the thread's tensors are gone; their blocks go back before the fresh level
        if "error" in out:
            log.warning("attention warm-up failed (the first step compiles it instead): %s", out["error"])
        else:
            phases["attention_warmup_sec"] = out["sec"]
