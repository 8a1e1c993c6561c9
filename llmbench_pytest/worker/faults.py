"""Runs inside each rank: a test-only switch that makes a chosen run fail in a chosen way.

LLMBENCH_INJECT_FAULT="<strategy>:<kind>[:<rank>]" (kind: oom, error, hang, exit, kill) makes
the first measured step of that strategy raise an out-of-memory error (`oom>N`: only at per-device
batches above N), raise a runtime error,
sleep forever, exit with code 13, or die from SIGKILL, on the given rank (all ranks when
omitted). The fault is raised
inside the real training step, so what follows (status, result.json, the agreement between
ranks, the session going on) is the path a real failure takes. Unset, it costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..config.spec import RunSpec

ENV = "LLMBENCH_INJECT_FAULT"
KINDS = ("oom", "error", "hang", "exit", "kill")


def maybe_inject(spec: RunSpec, rank: int) -> None:
    raw = os.environ.get(ENV)
    if not raw:
        return
    parts = raw.split(":")
    if len(parts) not in (2, 3) or parts[1].split(">")[0] not in KINDS:
        raise ValueError(f"{ENV}={raw!r}: expected <strategy>:<{'|'.join(KINDS)}>[:<rank>]")
    if parts[0] != spec.name or (len(parts) == 3 and int(parts[2]) != rank):
        return
    kind, _, above = parts[1].partition(">")
    if above and spec.per_device_batch <= int(above):
        return  # "oom>8": only batches above 8 run out of memory (the batch search's test)
    if kind == "oom":
        raise torch.OutOfMemoryError(f"out of memory (injected by {ENV}={raw})")
    if kind == "error":
        raise RuntimeError(f"injected failure ({ENV}={raw})")
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(13)
