"""Runs inside each rank: what the link between the ranks delivers, measured as nccl-tests measures
it, once per group of ranks (and kept per host, so later sessions on the same boot read it).

All ranks sweep all_reduce, all_gather and reduce_scatter in bf16 over message sizes from 1 MiB
to 1 GiB on the training backend (NCCL on a GPU, gloo on a CPU, where the sizes stop at 4 MiB),
plus one small message for the latency, and how much of a collective's time compute can hide
(worker/overlap_probe.py). Each size runs WARMUP untimed iterations, then ITERS
timed ones (CUDA events on a GPU); a rank's time is the mean iteration, and the figure is the
mean over ranks, as nccl-tests reports by default (-a 1). From the time t of S bytes over n ranks:
algbw = S / t, busbw = algbw x bus factor (analysis/collectives.py, nccl-tests' PERFORMANCE.md).

It runs before the group's first configuration, on a device nothing else uses yet, and hands back
what it allocated before the fresh memory level is taken. A strategy's achieved bus GB/s (from the
profiled steps' collectives) is shown beside the link's, at the strategy's mean message size.
LLMBENCH_LINK_PROBE=0 turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..analysis.collectives import bus_factor
from ..results.storage import write_json_atomic
from . import overlap_probe
from .dist import all_gather_object
from .overlap_probe import run_collective
from .trace_cache import cache_dir

LANE_ENV = "LLMBENCH_LANE"  # launch/lanes.py sets it in a lane's ranks; kept in step by tests

if TYPE_CHECKING:
    import logging

    from .dist import DistContext

ENV = "LLMBENCH_LINK_PROBE"
MIB = 1 << 20
GPU_SIZES = (MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB)
CPU_SIZES = (MIB // 4, MIB, 4 * MIB)
LATENCY_BYTES = 8 << 10
"""A message small enough that its time is the collective's latency, not its bandwidth."""
WARMUP, ITERS = 3, 10
KINDS = ("all_reduce", "all_gather", "reduce_scatter")
VERSION = 2
"""Bumped when the sweep changes: a kept result of another sweep is not read."""


def _time_one(kind: str, buf: torch.Tensor, size_elems: int, n: int, device: torch.device) -> float:
    """This rank's mean seconds per iteration."""
    for _ in range(WARMUP):
        run_collective(kind, buf, size_elems, n)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ITERS):
            run_collective(kind, buf, size_elems, n)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000 / ITERS
    dist.barrier()
    started = time.perf_counter()
    for _ in range(ITERS):
        run_collective(kind, buf, size_elems, n)
    return (time.perf_counter() - started) / ITERS


def _row(kind: str, size: int, seconds: float, n: int) -> dict[str, Any]:
    algbw = size / seconds / 1e9 if seconds > 0 else None
    return {
        "bytes": size,
        "time_us": seconds * 1e6,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * bus_factor(kind, n) if algbw is not None else None,
    }


def sweep(ctx: DistContext) -> dict[str, Any]:
    """Every rank: the sweep (module docstring); the same dict on every rank."""
    n, device = ctx.world_size, ctx.device
    sizes = GPU_SIZES if device.type == "cuda" else CPU_SIZES
    elem = 2  # bf16
    # one buffer holds the largest message and one rank's share beside it: S + S / n
    buf = torch.ones((max(sizes) + max(sizes) // n) // elem + n, dtype=torch.bfloat16, device=device)
    mine: list[tuple[str, int, float]] = []
    started = time.perf_counter()
    for kind in KINDS:
        for size in (LATENCY_BYTES, *sizes):
            elems = (size // elem) // n * n  # divisible by n for the gathers and scatters
            mine.append((kind, elems * elem, _time_one(kind, buf, elems, n, device)))
    overlaps = [overlap_probe.measure(kind, n, device, buf) for kind in KINDS]
    del buf
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    every = all_gather_object(ctx, ([t for _, _, t in mine], overlaps))
    out: dict[str, Any] = {"world_size": n, "dtype": "bf16", "iterations": ITERS, "warmup": WARMUP}
    for i, (kind, size, _) in enumerate(mine):
        mean = sum(float(r[0][i]) for r in every) / len(every)  # type: ignore[index]
        table = out.setdefault(kind, {"latency_us": None, "sizes": []})
        if size < min(sizes):
            table["latency_us"] = mean * 1e6
        else:
            table["sizes"].append(_row(kind, size, mean, n))
    for kind in KINDS:
        rows = out[kind]["sizes"]
        out[kind]["peak_busbw_gbps"] = max((r["busbw_gbps"] or 0.0) for r in rows) if rows else None
    size = overlap_probe.OVERLAP_BYTES.get(device.type, overlap_probe.OVERLAP_BYTES["cpu"])
    out["overlap"] = {
        kind: overlap_probe.summarize(size, [r[1][i] for r in every])  # type: ignore[index]
        for i, kind in enumerate(KINDS)
    }
    out["sweep_sec"] = time.perf_counter() - started
    return out


def _key(ctx: DistContext) -> str:
    """What decides the link's figures: the machine as booted, the ranks, the GPUs, NCCL's settings."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "no-boot-id"
    gpu = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu"
    nccl = sorted((k, v) for k, v in os.environ.items() if k.startswith("NCCL_"))
    parts = [
        VERSION, os.uname().nodename, boot, ctx.world_size, ctx.env.local_world_size, ctx.device.type, gpu,
        os.environ.get("CUDA_VISIBLE_DEVICES", ""), nccl, torch.__version__,
    ]  # fmt: skip
    return json.dumps(parts)


def _kept(key: str) -> Path | None:
    base = cache_dir()
    if base is None:
        return None
    return base.parent / "link-probes" / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def measure(ctx: DistContext, log: logging.Logger) -> dict[str, Any] | None:
    """Every rank, at the same point: the link's sweep, kept per host; None at one rank or when
    LLMBENCH_LINK_PROBE=0. Rank 0 decides whether a kept sweep is read, so all ranks agree."""
    if ctx.world_size < 2 or os.environ.get(ENV, "1") == "0":
        return None
    key = _key(ctx)
    path = _kept(key)
    kept = None
    if ctx.rank == 0 and path is not None and path.exists():
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            kept = None
    kept = all_gather_object(ctx, kept)[0]
    if isinstance(kept, dict) and kept.get("key") == key:
        return {**kept, "source": f"kept from an earlier sweep on this host ({path})"}
    log.info("measuring the link: %s over %d ranks (%s)", ", ".join(KINDS), ctx.world_size, ctx.backend)
    result = sweep(ctx)
    peaks = ", ".join(f"{k} {result[k]['peak_busbw_gbps']:.1f}" for k in KINDS)
    log.info("link: peak busbw GB/s %s; swept in %.1f s", peaks, result["sweep_sec"])
    result["key"] = key
    result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    lane = os.environ.get(LANE_ENV)
    if lane:  # other lanes trained meanwhile: good for this session, not kept for the next
        return {**result, "source": f"measured by this group of ranks on lane {lane}, beside the others"}
    if ctx.rank == 0 and path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, result)
        except OSError as exc:
            log.info("the link's sweep is not kept (%s): the next group measures it again", exc)
    return {**result, "source": "measured by this group of ranks"}


_measured: list[dict[str, Any] | None] = []
"""This process's sweep (or none), once its first run has asked for it."""


def measure_once(ctx: DistContext, log: logging.Logger) -> None:
    """The process's first run measures the link (every rank at once); a failed sweep is logged and
    leaves the runs without it: the link's figures are context, never a run's verdict."""
    if _measured:
        return
    try:
        _measured.append(measure(ctx, log))
    except Exception as exc:
        log.warning("the link's sweep failed (%s): runs here report no link figures", exc)
        _measured.append(None)


def measured() -> dict[str, Any] | None:
    return _measured[0] if _measured else None
