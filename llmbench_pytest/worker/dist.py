"""Runs inside each rank: the process groups a session trains and coordinates with.

Under torchrun the default group spans the job (NCCL for GPU tensors, gloo for CPU tensors);
a plain `pytest` run makes its own one-rank group, so every strategy runs the same code path.
A separate gloo group carries the plugin's own coordination (outcome agreement, the slowest
rank's step times), so it keeps working whatever state the training backend is in.
"""

from __future__ import annotations

import datetime
import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ..config.spec import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..config.ranks import RankEnv


@dataclass
class DistContext:
    env: RankEnv
    device: torch.device
    backend: str
    control: dist.ProcessGroup
    """gloo group over all ranks for the plugin's CPU-side coordination."""
    steps: dist.ProcessGroup | None
    """gloo group for the measurement's check points only (None at world size 1). Its own group: a
    rank that failed mid-window never reaches the next check point, and its peers must then wait
    out the timeout there, never pair that check point with the failed rank's next collective."""
    timeout_s: float
    created: bool
    """True when this module initialised the default group (and so must destroy it)."""

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size


def select_device(env: RankEnv, kind: str) -> torch.device:
    """One GPU per rank (LOCAL_RANK), or the CPU."""
    if kind == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if env.local_rank >= count:
        raise SpecError(
            f"this node runs {env.local_world_size} ranks but has {count} GPU(s): one GPU per rank is "
            f"needed. Run torchrun with --nproc_per_node={count}, or pass --llmbench-device=cpu."
        )
    return torch.device("cuda", env.local_rank)


def init(env: RankEnv, device_kind: str, timeout_s: float) -> DistContext:
    device = select_device(env, device_kind)
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif "OMP_NUM_THREADS" not in os.environ:
        # one intra-op thread per rank, as torchrun sets it: a lone process on all cores competes
        # with its own communication threads, and its step times swing by tens of percent
        torch.set_num_threads(1)
    created = False
    if not dist.is_initialized():
        if env.under_torchrun:
            dist.init_process_group(
                backend=backend, timeout=timeout, device_id=device if device.type == "cuda" else None
            )
        else:
            # DeepSpeed reads LOCAL_RANK from the environment, as torchrun would have set it
            os.environ.setdefault("LOCAL_RANK", "0")
            # a one-rank group needs no rendezvous: an in-process store is enough
            dist.init_process_group(
                backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
            )
        created = True
    # the control group waits for ranks that are themselves waiting out a training collective's
    # timeout, so it must outlast that timeout, or a rank would give up on its peers first
    control = dist.new_group(backend="gloo", timeout=timeout * 2 + datetime.timedelta(seconds=60))
    return DistContext(
        env=env,
        device=device,
        backend=backend,
        control=control,
        steps=_steps_group(env.world_size, timeout),
        timeout_s=timeout_s,
        created=created,
    )


def _steps_group(world_size: int, timeout: datetime.timedelta) -> dist.ProcessGroup | None:
    return dist.new_group(backend="gloo", timeout=timeout) if world_size > 1 else None


def renew_steps_group(ctx: DistContext) -> None:
    """After a failed run: a rank may have left a check point unanswered, so the group's sequence of
    collectives no longer matches across ranks; every rank calls this at the same point (after the
    run's outcome was agreed) and the next run starts on a fresh group."""
    if ctx.steps is not None:
        old, ctx.steps = ctx.steps, _steps_group(ctx.world_size, datetime.timedelta(seconds=ctx.timeout_s))
        dist.destroy_process_group(old)


def gather_steps(ctx: DistContext, completed: int, durations: list[float], cap: int) -> list[float]:
    """The step times every rank has completed, each the slowest rank's: the same list on every
    rank, from one all-gather over the steps group (a no-op at world size 1)."""
    if ctx.world_size == 1 or ctx.steps is None:
        return durations[:completed]
    mine = torch.zeros(cap + 1, dtype=torch.float64)
    mine[0] = completed
    mine[1 : completed + 1] = torch.tensor(durations[:completed], dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(every, mine, group=ctx.steps)
    stacked = torch.stack(every)
    count = int(stacked[:, 0].min().item())
    return stacked[:, 1 : count + 1].max(dim=0).values.tolist()


WATCHDOG_SCAN_S = 0.25
"""Longer than two scans of ProcessGroupNCCL's watchdog thread (every 100 ms): by then it has moved
every completed collective's kept tensors to the group's shelf, which the next collective empties."""
FLUSH_POLL_S = 0.05
"""How often the flush asks again while a rank still holds more than a fresh one may."""


def flush_device_collectives(ctx: DistContext, still_held: Callable[[], bool]) -> None:
    """Make NCCL hand back the tensors of the run's last collectives. ProcessGroupNCCL keeps the
    inputs of a collective nobody waited on (DDP's gradient all-reduces, 4 bytes per parameter)
    until its watchdog thread has seen the collective complete and moved them to a shelf, and the
    shelf is emptied by the group's next collective (tools/gpu/ddp_leftover_probe.py, 1x H100:
    495 MiB left after gc and after 2 s, 64 MiB after a barrier, the rest cuBLAS's workspace).
    One tiny all-reduce right after the teardown empties only what the watchdog had already
    shelved: on 1x H100 (2026-11-26) a fresh ddp rank still held 250 and 598 MiB of the last
    buckets after it, so the group ended and the next configuration paid a fresh start.

    So: the device finishes, and all-reduces follow FLUSH_POLL_S apart, each emptying what the
    watchdog has shelved by then, until no rank holds more than `still_held` allows, for at most
    WATCHDOG_SCAN_S. Each all-reduce carries whether any rank still holds too much (the maximum
    over ranks), so every rank stops after the same one. A run with nothing kept (FSDP, DeepSpeed,
    a flushed ddp) pays one all-reduce, where a fixed wait of WATCHDOG_SCAN_S cost every
    configuration 0.25 s. Every rank calls this at the same point after its teardown; nothing to
    do on a CPU."""
    if ctx.device.type != "cuda" or not dist.is_initialized():
        return
    torch.cuda.synchronize(ctx.device)
    flag = torch.zeros(1, device=ctx.device)
    for _ in range(1 + math.ceil(WATCHDOG_SCAN_S / FLUSH_POLL_S)):
        flag.fill_(1.0 if still_held() else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # also empties what the watchdog has shelved
        torch.cuda.synchronize(ctx.device)
        if flag.item() == 0.0:
            break
        time.sleep(FLUSH_POLL_S)  # the watchdog shelves the rest
    del flag
    torch.cuda.empty_cache()


def barrier(ctx: DistContext) -> None:
    if ctx.world_size > 1:
        dist.barrier(group=ctx.control)


def shutdown(ctx: DistContext) -> None:
    if ctx.created and dist.is_initialized():
        dist.destroy_process_group()


def all_gather_object(ctx: DistContext, obj: object) -> list[object]:
    """Every rank's `obj`, over the control group (a no-op list at world size 1)."""
    if ctx.world_size == 1:
        return [obj]
    out: list[object] = [None] * ctx.world_size
    dist.all_gather_object(out, obj, group=ctx.control)
    return out


def max_over_ranks(ctx: DistContext, values: list[float]) -> list[float]:
    """Element-wise maximum across ranks: a step ends when its slowest rank ends."""
    if ctx.world_size == 1 or not values:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.control)
    return t.tolist()


def mean_over_ranks(ctx: DistContext, values: list[float]) -> list[float]:
    if ctx.world_size == 1 or not values:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=ctx.control)
    return (t / ctx.world_size).tolist()
