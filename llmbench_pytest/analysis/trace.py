"""Reads a torch.profiler Chrome trace: time in collectives, how much of it compute did not hide,
the collectives themselves (kind, bytes, group: collectives.py), how long the device sat idle, and
the bytes copied between host and device. Standard library only (a trace is JSON).

On a GPU the collectives are the NCCL kernels and compute is every other kernel; a collective
counts as exposed where no compute kernel runs at the same time. On a CPU (gloo) the collectives
are the `gloo:*` annotations; they run on gloo's threads, so exposure is not computed there.
Times are unions of intervals, so overlapping collectives on several streams count once.
It also names the attention kernels that ran (cuDNN, flash, memory-efficient, math, FlashAttention-2):
SDPA's choice, or the one --llmbench-attention asked for, as the device really ran it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .collectives import collectives_in, schedule

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True)
class TraceSummary:
    steps: int
    comm_sec_per_step: float
    comm_exposed_sec_per_step: float | None
    compute_sec_per_step: float | None
    h2d_bytes_per_step: float | None
    d2h_bytes_per_step: float | None
    collectives_per_step: float
    span_sec_per_step: float
    """Wall span of the profiled steps (first to last event), per step; the profiler slows steps."""
    attention_kernels: dict[str, int] | None = None
    """Attention calls by kind (attention_kind), counted once per call: GPU kernels on a GPU, aten
    operators on CPU; None when none was seen."""
    device_span_sec_per_step: float | None = None
    """First to last device activity (kernels, copies), per step: the steps the shares of time in
    collectives are of (on a GPU; the profiler's own host work before the first kernel is not in it)."""
    device_idle_sec_per_step: float | None = None
    """Time within the device span when no kernel or copy ran, per step: the device waiting for
    the host (offload's CPU optimizer, a slow input pipeline, launch overhead)."""
    bus_bytes_per_step: float | None = None
    """Bytes every rank's links carried per step, summed over the collectives as they ran (nccl-tests'
    bus bytes: S x bus factor); None where the trace recorded no sizes."""
    comm_bytes_per_step: float | None = None
    """nccl-tests' S summed over the step's collectives."""
    collectives: list[dict[str, Any]] = field(default_factory=list)
    """The collective schedule per step (collectives.schedule): kind, dtype, S, group, count."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length where two sorted, merged interval lists overlap."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# operators SDPA dispatches to, and FlashAttention-2's own, by the kind they are
_ATTENTION_OPS = {
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_attention_math": "math",
    "flash_attn::_flash_attn_forward": "fa2",
}


def attention_kind(name: str, kernel: bool) -> str | None:
    """The attention implementation a GPU kernel's or an operator's name belongs to, or None.
    cuDNN's kernel names contain "flash" too, so cuDNN is tested first; FlashAttention-2's own
    kernels live in the `flash::` namespace, torch's copy of them in `pytorch_flash::`."""
    if not kernel:
        return _ATTENTION_OPS.get(name)
    low = name.lower()
    if "cudnn" in low and ("sdpa" in low or "fprop" in low or "bprop" in low):
        return "cudnn"
    if "pytorch_flash" in low:
        return "flash"
    if "fmha_cutlass" in low or "mem_efficient" in low:
        return "efficient"
    if "flash::" in low or low.startswith(("flash_fwd", "flash_bwd")):
        return "fa2"
    return None


def _attention_kernels(events: list[dict[str, Any]], device: str) -> dict[str, int] | None:
    """Kind -> count: GPU kernels on a GPU (what the device ran), operator calls where no kernel
    carries the name (CPU; SDPA's math backend, which runs plain matmuls)."""
    kernels: dict[str, int] = {}
    ops: dict[str, int] = {}
    for e in events:
        cat = e.get("cat", "")
        on_gpu = device == "cuda" and cat == "kernel"
        if on_gpu or cat == "cpu_op":
            kind = attention_kind(str(e.get("name", "")), on_gpu)
            if kind:
                into = kernels if on_gpu else ops
                into[kind] = into.get(kind, 0) + 1
    merged = ops
    if device == "cuda":  # an op the device ran under its own kernel names counts as those kernels
        merged = {**kernels, **{k: v for k, v in ops.items() if k not in kernels and k in ("math", "fa2")}}
    return dict(sorted(merged.items(), key=lambda kv: -kv[1])) or None


def summarize(trace: dict[str, Any], steps: int, device: str, world_size: int = 1) -> TraceSummary:
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    us = 1e-6
    comm: list[tuple[float, float]] = []
    compute: list[tuple[float, float]] = []
    device_busy: list[tuple[float, float]] = []
    h2d = d2h = 0.0
    copies = 0
    for e in events:
        name, cat = str(e.get("name", "")), e.get("cat", "")
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        if device == "cuda":
            if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
                device_busy.append(span)
            if cat == "kernel":
                (comm if "nccl" in name.lower() else compute).append(span)
            elif cat == "gpu_memcpy":
                nbytes = float((e.get("args") or {}).get("bytes", 0))
                copies += 1
                if "HtoD" in name:
                    h2d += nbytes
                elif "DtoH" in name:
                    d2h += nbytes
        elif cat == "user_annotation" and name.startswith("gloo:"):
            comm.append(span)
    comm_u, compute_u = _union(comm), _union(compute)
    starts = [float(e["ts"]) for e in events]
    ends = [float(e["ts"]) + float(e["dur"]) for e in events]
    span_s = (max(ends) - min(starts)) * us if events else 0.0
    n = max(1, steps)
    on_gpu = device == "cuda"
    exposed = _length(comm_u) - _intersection(comm_u, compute_u)
    busy = _union(device_busy)
    device_span = (busy[-1][1] - busy[0][0]) * us / n if busy else None
    ran = collectives_in(events, device, world_size)
    # the step's volume only where every collective's size is known: a partial sum would pass for it
    sized = all(c.size_bytes is not None for c in ran) and bool(ran)
    return TraceSummary(
        steps=steps,
        comm_sec_per_step=_length(comm_u) * us / n,
        comm_exposed_sec_per_step=exposed * us / n if on_gpu else None,
        compute_sec_per_step=_length(compute_u) * us / n if on_gpu else None,
        h2d_bytes_per_step=h2d / n if on_gpu else None,
        d2h_bytes_per_step=d2h / n if on_gpu else None,
        collectives_per_step=len(comm) / n,
        span_sec_per_step=span_s / n,
        attention_kernels=_attention_kernels(events, device),
        device_span_sec_per_step=device_span,
        device_idle_sec_per_step=device_span - _length(busy) * us / n if device_span is not None else None,
        bus_bytes_per_step=sum(c.bus_bytes or 0.0 for c in ran) / n if sized else None,
        comm_bytes_per_step=sum(c.size_bytes or 0.0 for c in ran) / n if sized else None,
        collectives=schedule(ran, n),
    )
