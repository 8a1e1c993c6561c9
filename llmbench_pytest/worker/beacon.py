"""Runs inside each rank: where this rank is in the group's sequence of collectives, and how a run
that failed here tells the launcher at once.

- The sequence: a thread writes, every INTERVAL_S, how many collectives this rank has issued on
  its training process group (torch's own counter, `_get_sequence_number_for_group`) into
  rank<k>.seq beside the run's result. When a group stops moving, the rank that issued fewer
  collectives than the others is the one that stopped; the others wait for it inside a collective
  (a GPU rank's host runs ahead of its device, so a waiting rank has issued at least as many).
  The thread only reads a counter: a rank stuck in Python or in a kernel still reports.
- The failure: a rank whose run raised (out of memory, any error) writes rank<k>.failed with its
  status and message before it tears anything down. Its peers may be waiting for it inside a
  collective until the timeout (600 s by default); the launcher reads the file and ends the group
  within seconds, with this rank's status and message (launch/launcher.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from ..results.storage import write_json_atomic

if TYPE_CHECKING:
    from pathlib import Path

    from .dist import DistContext

INTERVAL_S = 0.5


def sequence_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank{rank}.seq"  # launch/diagnose.py reads it; kept in step by tests


def failure_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank{rank}.failed"  # launch/launcher.py reads it; kept in step by tests


def _counter(ctx: DistContext) -> Any:
    """The callable that reads the training group's collective count, or None where torch has none."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    group = dist.distributed_c10d._get_default_group()
    with contextlib.suppress(Exception):  # the backend that carries the device's collectives (NCCL)
        backend = group._get_backend(ctx.device)
        backend._get_sequence_number_for_group()
        return backend._get_sequence_number_for_group
    with contextlib.suppress(Exception):
        group._get_sequence_number_for_group()
        return group._get_sequence_number_for_group
    return None


class SequenceBeacon:
    """`with SequenceBeacon(path, ctx):` keeps `path` holding this rank's collective count."""

    def __init__(self, path: Path, ctx: DistContext) -> None:
        self.path = path
        self.read = _counter(ctx) if ctx.world_size > 1 else None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def _write(self) -> None:
        with contextlib.suppress(Exception):
            write_json_atomic(self.path, {"seq": int(self.read()), "time": time.time()})

    def _loop(self) -> None:
        while not self.stop.wait(INTERVAL_S):
            self._write()

    def __enter__(self) -> SequenceBeacon:
        if self.read is not None:
            self._write()
            self.thread = threading.Thread(target=self._loop, name="llmbench-sequence", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self._write()


def report_failure(run_dir: Path | None, rank: int, status: str, error: str) -> None:
    """Tell the launcher now that this rank's run failed (module docstring); never raises."""
    if run_dir is None:
        return
    with contextlib.suppress(Exception):
        write_json_atomic(
            failure_path(run_dir, rank), {"rank": rank, "status": status, "error": error, "time": time.time()}
        )
