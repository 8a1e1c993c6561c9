"""Runs inside each rank: a few extra, untimed steps under torch.profiler.

They measure what the timed window cannot without disturbing it: time in collectives and how
much of it compute hides, and the bytes copied between host and device (offload traffic shows
here). The Chrome trace they produce is what --llmbench-profile keeps (rank 0), readable in
Perfetto (ui.perfetto.dev) and TensorBoard's profiler plugin.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.profiler import ProfilerActivity, profile

from ..analysis.trace import TraceSummary, summarize

TEARDOWN_ENV = "TEARDOWN_CUPTI"
"""Kineto finalizes CUPTI when the profiler stops only where this says "1". Left subscribed, CUPTI
slows every kernel launch after it: on 1x H100 (torch 2.11, CUDA 13.0, 2026-11-26) a host-bound
step ran 1.29-1.31x slower after one profiled step, where a process that profiled nothing ran
0.98-1.13x (tools/gpu/profiler_after.py, docs/results/2026-11-26-h100-pretrain-fresh-host-4). A
warm rank measures its next configurations after these steps (every configuration at two ranks or
more, offload at one), so each rank sets it before its first profiled step, unless the environment
says otherwise; torch itself sets "0" where CUDA graphs need CUPTI kept (torch.profiler)."""

if TYPE_CHECKING:
    from collections.abc import Callable


def ask_cupti_teardown(device_type: str) -> None:
    """On a GPU, have Kineto finalize CUPTI when the profiler stops (TEARDOWN_ENV), unless the
    environment already says; a CPU's profiler has no CUPTI to leave behind."""
    if device_type == "cuda":
        os.environ.setdefault(TEARDOWN_ENV, "1")


def profile_steps(
    step: Callable[[], None],
    steps: int,
    device: torch.device,
    keep_trace: Path | None,
    host_ops: bool = True,
    world_size: int = 1,
) -> TraceSummary:
    """`host_ops`: record the host's operators too. On a GPU what the summary reads is the
    device's (kernels, copies and their bytes) except the attention operators whose kernels carry
    no attention name (SDPA's math backend, FlashAttention-2's own): without them the trace is the
    device's alone, and an offload step under the profiler took 1.10-1.34 s where the step itself
    took 0.65-0.71 s (1x H100, 2026-11-26), most of the difference recording, exporting and
    reading back every operator of a ZeRO step. A kept trace (--llmbench-profile) always has both.

    At `world_size` 2 or more the collectives' sizes are recorded too (record_shapes): NCCL's come
    from the host's record_param_comms operators, gloo's from its annotations' input shapes
    (analysis/collectives.py). Recording the host's operators slows a host-bound step, so on a GPU
    the sizes come from the last profiled step alone and the times (in collectives, exposed, the
    device idle) from the steps before it, recorded on the device only."""
    ask_cupti_teardown(device.type)
    sizes = world_size > 1
    device_only = device.type == "cuda" and not host_ops and keep_trace is None
    if sizes and device_only and steps >= 2:
        timed = _profile(step, steps - 1, device, None, host=False, shapes=False, world_size=world_size)
        sized = _profile(step, 1, device, None, host=True, shapes=True, world_size=world_size)
        return dataclasses.replace(
            timed,
            bus_bytes_per_step=sized.bus_bytes_per_step,
            comm_bytes_per_step=sized.comm_bytes_per_step,
            collectives=sized.collectives,
        )
    host = not device_only or sizes
    return _profile(step, steps, device, keep_trace, host=host, shapes=sizes, world_size=world_size)


def _profile(
    step: Callable[[], None],
    steps: int,
    device: torch.device,
    keep_trace: Path | None,
    *,
    host: bool,
    shapes: bool,
    world_size: int,
) -> TraceSummary:
    activities = [ProfilerActivity.CPU] if host or device.type != "cuda" else []
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize(device)
    with profile(activities=activities, record_shapes=shapes) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    if keep_trace is not None:
        path = keep_trace
    else:
        handle = tempfile.NamedTemporaryFile(prefix="llmbench-trace-", suffix=".json", delete=False)
        handle.close()
        path = Path(handle.name)
    try:
        prof.export_chrome_trace(str(path))
        return summarize(json.loads(path.read_text()), steps, device.type, world_size)
    finally:
        if keep_trace is None:
            path.unlink(missing_ok=True)
