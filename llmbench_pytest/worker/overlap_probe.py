"""Runs inside each rank, beside the link probe: how much of a collective's time compute on the same
device can hide, measured on this link rather than assumed.

A collective that runs beside compute is not free: its kernels take SMs and memory bandwidth from
the compute (NCCL's channels are thread blocks on the same SMs), so the compute slows while both
run. For each collective kind, with message size OVERLAP_BYTES, the probe times a train of
collectives alone (t_comm), a train of bf16 matrix multiplies of about the same length alone
(t_compute), and both started together, the collectives on the backend's stream and the multiplies
on the device's (t_both). The share of the shorter one the other hid:

    hidden_share = (t_compute + t_comm - t_both) / min(t_compute, t_comm)

1 is perfect overlap (t_both is the longer of the two), 0 none (t_both is their sum; slower than
that is clipped to 0). Together faster than the longer one alone (a share above 1) is no overlap at
all but the timings' noise: no share is recorded (None), never 100% (analysis/collectives.py's
hidden_share). The scale prediction (plan/scale.py) charges a collective that compute can hide
(1 - hidden_share) of its time at the node's link speed. Each figure is the median of REPEATS,
every rank starting each timing together; the mean over ranks is recorded. On a CPU (gloo runs
its collectives on threads of its own) it measures the same thing for the cores, at small sizes:
the code path runs in CI, the figure is no GPU's.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..analysis.collectives import hidden_share

if TYPE_CHECKING:
    from collections.abc import Callable

MIB = 1 << 20
OVERLAP_BYTES = {"cuda": 64 * MIB, "cpu": MIB}
"""A message of a gradient bucket's or a layer's size (DDP's buckets are 25 MiB, a 1B model's layer
60 to 120 MB): large enough that its time is bandwidth, not latency."""
GEMM = {"cuda": (4096, torch.bfloat16), "cpu": (128, torch.float32)}
TRAIN_S = {"cuda": 0.02, "cpu": 0.02}
"""How long each train (of collectives, of multiplies) runs: long against a launch, short in all."""
REPEATS = 3
MIN_BALANCE = 0.25
"""The shorter train's time over the longer's below which no share is recorded (None)."""


def run_collective(kind: str, buf: torch.Tensor, size_elems: int, n: int, async_op: bool = False) -> Any:
    """One collective of nccl-tests' size S = size_elems elements; its work handle when async."""
    if kind == "all_reduce":
        return dist.all_reduce(buf[:size_elems], async_op=async_op)
    part = size_elems // n
    if kind == "all_gather":
        return dist.all_gather_into_tensor(buf[: part * n], buf[part * n : part * (n + 1)], async_op=async_op)
    return dist.reduce_scatter_tensor(buf[part * n : part * (n + 1)], buf[: part * n], async_op=async_op)


def _timed(fn: Callable[[], None], device: torch.device) -> float:
    """Seconds of `fn`'s device work, every rank starting together (a one-element all-reduce, and
    on a GPU the device idle after it)."""
    dist.all_reduce(torch.zeros(1, device=device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(kind: str, n: int, device: torch.device, buf: torch.Tensor) -> dict[str, Any]:
    """This rank's timings for one kind (module docstring); `buf` holds OVERLAP_BYTES and a share."""
    dev = device.type if device.type in OVERLAP_BYTES else "cpu"
    side, dtype = GEMM[dev]
    a = torch.randn(side, side, dtype=dtype, device=device)
    b = torch.randn(side, side, dtype=dtype, device=device)
    out = torch.empty(side, side, dtype=dtype, device=device)
    elems = (OVERLAP_BYTES[dev] // buf.element_size()) // n * n

    def compute(reps: int) -> Callable[[], None]:
        def go() -> None:
            for _ in range(reps):
                torch.mm(a, b, out=out)

        return go

    def comm(count: int) -> Callable[[], None]:
        def go() -> None:
            for _ in range(count):
                run_collective(kind, buf, elems, n)

        return go

    def both(reps: int, count: int) -> Callable[[], None]:
        def go() -> None:
            # the collectives on the backend's stream (waiting on nothing pending), then the
            # multiplies on the device's, then the device's stream waits for the collectives
            works = [run_collective(kind, buf, elems, n, async_op=True) for _ in range(count)]
            compute(reps)()
            for w in works:
                w.wait()

        return go

    # warm both first: the communicator's buffers, cuBLAS's handle and workspace (timed cold, the
    # multiply read about 30 times too long, and its train ran 0.6 ms beside 18 ms of collectives:
    # 2x H200, 2026-11-27)
    _timed(comm(2), device)
    _timed(compute(4), device)
    one_comm = _timed(comm(2), device) / 2
    one_gemm = _timed(compute(8), device) / 8
    # every rank must issue the same number of collectives: rank 0's counts for all
    counts = torch.tensor(
        [max(2, round(TRAIN_S[dev] / max(one_comm, 1e-6))), 0], dtype=torch.float64, device=device
    )
    counts[1] = max(2, round(float(counts[0]) * one_comm / max(one_gemm, 1e-7)))
    dist.broadcast(counts, 0)
    count, reps = int(counts[0]), int(counts[1])
    runs = [
        (_timed(compute(reps), device), _timed(comm(count), device), _timed(both(reps, count), device))
        for _ in range(REPEATS)
    ]
    t_compute, t_comm, t_both = (statistics.median(r[i] for r in runs) for i in range(3))
    return {"compute_s": t_compute, "comm_s": t_comm, "both_s": t_both}


def summarize(size_bytes: int, per_rank: list[dict[str, float]]) -> dict[str, Any]:
    """The mean over ranks of each time, and the share from those means."""
    mean = {k: sum(r[k] for r in per_rank) / len(per_rank) for k in ("compute_s", "comm_s", "both_s")}
    shorter, longer = sorted((mean["compute_s"], mean["comm_s"]))
    balanced = longer > 0 and shorter / longer >= MIN_BALANCE
    # a train much shorter than the other says little of how the two share the device
    share = hidden_share(mean["compute_s"], mean["comm_s"], mean["both_s"]) if balanced else None
    note = None
    if not balanced:
        note = f"the two trains came out {shorter * 1e3:.2f} and {longer * 1e3:.2f} ms: too unequal to tell"
    elif share is None:
        note = (
            f"both together took {mean['both_s'] * 1e3:.2f} ms, less than the longer train alone "
            f"({longer * 1e3:.2f} ms): the timings' noise, no share"
        )
    return {
        "bytes": size_bytes,
        "compute_ms": mean["compute_s"] * 1e3,
        "comm_ms": mean["comm_s"] * 1e3,
        "both_ms": mean["both_s"] * 1e3,
        "hidden_share": share,
        "note": note,
    }
