"""Runs inside each rank: a test-only switch that makes a chosen run fail in a chosen way.

LLMBENCH_INJECT_FAULT="<strategy>:<kind>[:<rank>]" (all ranks when the rank is omitted), or several
such specs separated by commas, the first that names a run's strategy and rank applying to it (one
session can then carry a fault in one configuration and another fault, or none, in the next):

- oom, error, hang, exit, kill: the first measured step raises an out-of-memory error (`oom>N`:
  only at per-device batches above N), raises a runtime error, sleeps forever, exits with code
  13, or dies from SIGKILL;
- slow=SECONDS[@RUN]: from the first measured step on, every optimizer step of that rank waits for
  its device and then sleeps SECONDS: a straggler, as a slower GPU or a busy host makes one.
  `@RUN` slows only the RUN-th run of that strategy in this process (1-based): with
  --llmbench-repeat in-process, one repeat that disagrees with the others;
- jitter=SECONDS: every optimizer step of that rank sleeps a random time between 0 and SECONDS
  first: an erratic rank, whose steps vary so much that a short run's mean is not known;
- teardown: the run trains and measures, then releasing its memory raises: the figures are kept
  in the failed run's per-rank records, and its warm group ends;
- retain=MB: the run's teardown keeps a reference to MB megabytes of tensor on the run's device
  (in this module's globals) past the run: memory a warm rank fails to hand back, as a cache or a
  forgotten reference would keep it;
- setting: the first measured step sets float32 matmuls to "medium" precision and leaves it so:
  a process-wide switch a run (or a library it loads) flips for good, as TF32 or an attention
  backend would be flipped;
- stage=N: DeepSpeed runs that strategy at ZeRO stage N (zero2:stage=1 is a ZeRO-2 that does not
  partition its gradients): a strategy whose state is not sharded as its name says.

The fault acts inside the real training run, so what follows (status, result.json, the checks,
the agreement between ranks, the session going on) is the path a real failure takes. Unset, it
costs one dict lookup.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import TYPE_CHECKING

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

if TYPE_CHECKING:
    from ..config.spec import RunSpec

ENV = "LLMBENCH_INJECT_FAULT"
KINDS = ("oom", "error", "hang", "exit", "kill", "slow", "jitter", "stage", "teardown", "retain", "setting")
_runs: dict[str, int] = {}
"""Runs of each strategy this process has started measuring (for slow=S@RUN)."""
_slow_hook: list[torch.utils.hooks.RemovableHandle] = []
_retained: list[torch.Tensor] = []
"""What retain=MB keeps past its run."""


def _parse(spec: RunSpec, rank: int) -> tuple[str, str] | None:
    """(kind, argument) when the fault applies to this strategy and rank, else None."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    for one in raw.split(","):
        parts = one.split(":")
        kind, _, arg = parts[1].replace(">", "=", 1).partition("=") if len(parts) > 1 else ("", "", "")
        if len(parts) not in (2, 3) or kind not in KINDS:
            raise ValueError(f"{ENV}={raw!r}: expected <strategy>:<{'|'.join(KINDS)}>[:<rank>][,...]")
        if parts[0] == spec.name and (len(parts) == 2 or int(parts[2]) == rank):
            return kind, arg
    return None


def declared(strategy: str) -> str | None:
    """The fault specs that name this strategy (any rank), for its result.json: a run with a fault
    injected is not a healthy run, and what pools healthy runs' speeds (the decision's prior,
    tools/session_spread.py) must not count it."""
    mine = [one for one in os.environ.get(ENV, "").split(",") if one.split(":")[0] == strategy]
    return ",".join(mine) or None


def zero_stage(spec: RunSpec, stage: int) -> int:
    """The ZeRO stage DeepSpeed is configured with: `stage`, unless a stage=N fault replaces it."""
    fault = _parse(spec, 0)  # the config is the same on every rank
    if fault is None or fault[0] != "stage":
        return stage
    return int(fault[1])


def teardown_fault(spec: RunSpec, rank: int, device: torch.device) -> None:
    """Called before a run's memory is released."""
    fault = _parse(spec, rank)
    if fault is not None and fault[0] == "teardown":
        raise RuntimeError(f"injected teardown failure ({ENV}={os.environ[ENV]})")
    if fault is not None and fault[0] == "retain":
        _retained.append(torch.ones(int(float(fault[1]) * 2**20) // 4, device=device))


def maybe_inject(spec: RunSpec, rank: int) -> None:
    """Called at the first measured step of every run."""
    for handle in _slow_hook:  # a straggler slows its own run only
        handle.remove()
    _slow_hook.clear()
    fault = _parse(spec, rank)
    if fault is None:
        return
    kind, arg = fault
    if kind == "oom":
        if arg and spec.per_device_batch <= int(arg):
            return  # "oom>8": only batches above 8 run out of memory (the batch search's test)
        raise torch.OutOfMemoryError(f"out of memory (injected by {ENV}={os.environ[ENV]})")
    if kind == "error":
        raise RuntimeError(f"injected failure ({ENV}={os.environ[ENV]})")
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "exit":
        os._exit(13)
    if kind in ("slow", "jitter"):
        _slow_down(spec, rank, kind, arg)
    if kind == "setting":
        torch.set_float32_matmul_precision("medium")


def _slow_down(spec: RunSpec, rank: int, kind: str, arg: str) -> None:
    seconds, _, which = (arg or "0.5").partition("@")
    _runs[spec.name] = _runs.get(spec.name, 0) + 1
    if which and _runs[spec.name] != int(which):
        return
    delay = float(seconds)
    draw = random.Random(spec.seed + rank)  # the same erratic steps on every run of the test

    def sleep_first(_optimizer: torch.optim.Optimizer, _args: object, _kwargs: object) -> None:
        # On a GPU the host runs ahead of the device: a sleep while the step's backward is still
        # queued is hidden, and a 10% "slow" ddp on 1x H200 measured no slower at all (2026-11-29).
        # Waiting for the device first makes the sleep a stall of the whole step, as a slower GPU's.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        time.sleep(delay if kind == "slow" else draw.uniform(0, delay))

    # every optimizer step of any strategy (DeepSpeed's wrap a torch optimizer) passes here
    _slow_hook.append(register_optimizer_step_pre_hook(sleep_first))
