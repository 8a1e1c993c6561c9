"""Look before training: the GPUs a session will train on are free of other processes.

Another job's process on our GPU makes every configuration of the session run out of memory, or
measure that job's work as ours. So before the first configuration (when collection has finished,
and only if a benchmark that will train is selected and the device is a GPU) the session asks
NVML which compute processes hold memory on those GPUs, leaves its own out (this process, its
children, and under torchrun or pytest-xdist its siblings, the other ranks or workers of the same
session), and names any other in one line: the GPU, the process id and the memory it holds. It
then stops before anything trains, or waits for the GPUs with --llmbench-wait-for-gpus=SECONDS.

NVML answers without creating a CUDA context. `busy` is the decision, over data shaped like
NVML's answers (`GpuUse`), and `wait_for_gpus` the polling, with the query, the clock and the
sleep passed in: a test drives both with a fake busy GPU, no GPU needed.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.nvml import nvml_session, text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

GIB = 2**30
UNLISTED_FLOOR_BYTES = 2 * GIB
"""Memory in use that no listed process accounts for, above which a GPU counts as held (processes
NVML does not name from inside a container). An idle GPU shows a few hundred MiB used by the
driver; a process that matters holds gigabytes."""
UNLISTED_FRACTION = 0.05
"""... or above this fraction of the GPU's memory, whichever is larger."""
POLL_S = 5.0
"""How often --llmbench-wait-for-gpus asks again."""
SAY_EVERY_S = 60.0
"""How often a wait that sees no change says that it is still waiting."""


@dataclass(frozen=True)
class GpuProcess:
    """One entry of nvmlDeviceGetComputeRunningProcesses."""

    pid: int
    used_bytes: int | None
    """usedGpuMemory; None where NVML cannot tell (it reports NVML_VALUE_NOT_AVAILABLE)."""


@dataclass(frozen=True)
class GpuUse:
    """What NVML says about one GPU the session will use."""

    gpu: str
    """The GPU as CUDA_VISIBLE_DEVICES names it: its index, or its UUID."""
    name: str
    total_bytes: int
    used_bytes: int
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True)
class Holder:
    """Something other than this session that holds memory on one of its GPUs."""

    gpu: str
    pid: int | None
    """None: memory in use that no listed process accounts for."""
    used_bytes: int | None
    command: str = ""

    def line(self) -> str:
        held = (
            f"{self.used_bytes / GIB:.1f} GiB" if self.used_bytes is not None else "memory (amount unknown)"
        )
        if self.pid is None:
            return f"GPU {self.gpu}: {held} in use by processes NVML does not name (another container?)"
        what = f" ({self.command})" if self.command else ""
        return f"GPU {self.gpu}: process {self.pid}{what} holds {held}"


def _command(pid: int) -> str:
    """The process's command line, shortened, where this host shows it ('' otherwise)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    argv = raw.decode(errors="replace").split("\0")
    # the program by its name: its directory (a venv's path) says little and would push the
    # arguments, which say what job it is, past the cut
    argv[0] = os.path.basename(argv[0])
    words = " ".join(" ".join(argv).split())  # one line: no newlines
    return words if len(words) <= 60 else words[:57] + "..."


def busy(gpus: Iterable[GpuUse], ours: set[int], command: Callable[[int], str] = _command) -> list[Holder]:
    """Who else holds the GPUs: every listed process not in `ours`, and, per GPU, memory in use
    beyond what its listed processes hold when that is more than an idle GPU shows."""
    out: list[Holder] = []
    for g in gpus:
        for p in g.processes:
            if p.pid not in ours:
                out.append(Holder(g.gpu, p.pid, p.used_bytes, command(p.pid)))
        sizes = [p.used_bytes for p in g.processes]
        if None in sizes:
            continue  # NVML does not say what each holds: nothing to account for
        unlisted = g.used_bytes - sum(s for s in sizes if s is not None)
        if unlisted > max(UNLISTED_FLOOR_BYTES, UNLISTED_FRACTION * g.total_bytes):
            out.append(Holder(g.gpu, None, unlisted))
    return out


def describe(holders: Sequence[Holder]) -> str:
    return "; ".join(h.line() for h in holders)


def refusal(holders: Sequence[Holder], waited_s: float | None = None) -> str:
    """The one line a session stops with."""
    waited = f" (still after waiting {waited_s:.0f} s)" if waited_s else ""
    how_long = "longer" if waited_s else "for them"
    fix = (
        f"stop it, pick free GPUs with CUDA_VISIBLE_DEVICES, or wait {how_long} with "
        "--llmbench-wait-for-gpus=SECONDS"
    )
    return (
        f"llmbench: another process holds the GPUs this session would train on{waited}: {describe(holders)}. "
        f"Its runs would run out of memory or measure that process's work as theirs: {fix}."
    )


def wait_for_gpus(
    query: Callable[[], list[GpuUse]],
    ours: Callable[[], set[int]],
    limit_s: float,
    say: Callable[[str], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = POLL_S,
) -> tuple[list[Holder], float]:
    """Ask until nobody else holds the GPUs or `limit_s` has passed (0: ask once). Returns who
    still holds them (empty: free) and how long it waited. Says what it waits for when it starts,
    when that changes, and at least every SAY_EVERY_S."""
    start = clock()
    holders = busy(query(), ours())
    said, said_at = "", start
    while holders:
        waited = clock() - start
        if waited >= limit_s:
            return holders, waited
        now = describe(holders)
        if now != said or clock() - said_at >= SAY_EVERY_S:
            say(f"llmbench: waiting for the GPUs ({waited:.0f} of {limit_s:.0f} s): {now}")
            said, said_at = now, clock()
        sleep(max(0.0, min(poll_s, limit_s - waited)))
        holders = busy(query(), ours())
        if not holders:
            say(f"llmbench: the GPUs are free after {clock() - start:.0f} s; starting")
    return holders, clock() - start


def query_gpus(ids: Sequence[str]) -> list[GpuUse]:
    """NVML's answer for each GPU (an index or a UUID as CUDA_VISIBLE_DEVICES names it; MIG
    instances are left out). Raises NvmlUnavailable."""
    out = []
    with nvml_session() as nvml:
        for ident in ids:
            try:
                if ident.isdigit():
                    handle = nvml.nvmlDeviceGetHandleByIndex(int(ident))
                elif ident.startswith("GPU-"):
                    handle = nvml.nvmlDeviceGetHandleByUUID(ident)
                else:
                    continue
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                name = text(nvml.nvmlDeviceGetName(handle))
            except Exception:  # an NVMLError for this GPU: it cannot be looked at
                continue
            found = tuple(
                GpuProcess(int(p.pid), int(p.usedGpuMemory) if isinstance(p.usedGpuMemory, int) else None)
                for p in procs
            )
            out.append(GpuUse(ident, name, int(mem.total), int(mem.used), found))
    return out


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc ({} where there is none)."""
    tree: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 1 and fields[1].isdigit():
                tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def session_pids(siblings: bool) -> set[int]:
    """This process and every process under it; with `siblings` (under torchrun: the job's other
    ranks; a pytest-xdist worker: the other workers), every process under its parent too."""
    tree = _children()
    roots = [os.getppid()] if siblings else [os.getpid()]
    ours = {os.getpid(), *roots}
    todo = list(roots)
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return ours


def visible_gpus(count: int, local_rank: int | None) -> list[str]:
    """The GPUs this process's runs use, as CUDA_VISIBLE_DEVICES names them: all `count` of them
    (launcher mode, in-process), or the one of rank `local_rank` (under torchrun)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else []
    ids = ids[:count] if visible is not None else [str(i) for i in range(count)]
    if local_rank is not None and ids:
        return [ids[local_rank % len(ids)]]
    return ids
