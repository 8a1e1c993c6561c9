"""Which session wrote a result that says "running", and whether that session is still alive.

Standard library only. A run's result.json starts as a placeholder with status "running"
(session/fixture.py) and is rewritten when the run ends, even by Ctrl-C or SIGTERM. A session
killed outright (SIGKILL, the OOM killer, a scheduler's time limit) leaves the placeholder behind,
and a report must not read it as a run in progress, nor as one that did not fit.

The placeholder records the pytest process that owns the run (`metadata.session`: host, pid, the
process's start time and the boot it started in, so a reused pid or a reboot is not taken for it).
On that host the answer is certain: the process is there (and not a zombie) or it is not. Elsewhere,
and for results written before this field existed, the run's heartbeat decides: a live run's rank 0
rewrites its progress file at every phase and step, and a rank quiet for longer than the launcher's
limit (launch/diagnose.quiet_limit_s of the run's --llmbench-timeout) has been ended by a live
session, which then rewrites the result. Older than that, plus a minute for the rewrite, nobody is
going to finish it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_TIMEOUT_S = 600.0
"""--llmbench-timeout's default, for results that do not record the session's options."""
REWRITE_SLACK_S = 60.0
"""Beyond the quiet limit: the time a live session takes to end a hung group and rewrite the result."""


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def this_session() -> dict[str, Any]:
    """What a running placeholder records about the process that will finish it (this one)."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    return {
        "host": socket.gethostname(),
        "pid": pid,
        # clock ticks after boot (field 22 of /proc/<pid>/stat): tells this process from a later one
        # that got the same pid
        "pid_start": int(stat[19]) if stat and len(stat) > 19 else None,
        "boot_id": _boot_id(),
    }


def session_alive(owner: Mapping[str, Any]) -> bool | None:
    """True or False when `owner` (a placeholder's metadata.session) ran on this host; None when
    it ran elsewhere or says too little to tell."""
    if not isinstance(owner, dict):
        return None
    pid = owner.get("pid")
    if owner.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return None
    boot = owner.get("boot_id")
    if boot and _boot_id() and boot != _boot_id():
        return False  # the machine rebooted since
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    except OSError:
        return None
    return _same_process(pid, owner.get("pid_start"))


def _same_process(pid: int, start: Any) -> bool:
    """Whether the live process `pid` is the one that started at `start` (and is not a zombie)."""
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc (not Linux): the pid exists, which is all that can be told
    if stat[0] in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    if isinstance(start, int) and len(stat) > 19 and stat[19].isdigit():
        return int(stat[19]) == start  # else the pid now belongs to a later process
    return True


@dataclass(frozen=True)
class LastHeard:
    """When a run last showed a sign of life, and what it was doing then."""

    at: float
    """Seconds since the epoch."""
    what: str
    """'phase measuring, step 5 of 12' from rank 0's progress file, or which file was written last."""

    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.at))


def _phase(beat: Mapping[str, Any]) -> str:
    phase = beat.get("phase")
    if not phase:
        message = str(beat.get("message") or "").strip()
        return f"its last message: {message[:120]}" if message else "its progress file"
    step, steps = beat.get("step"), beat.get("steps")
    if step is not None and steps:
        return f"phase {phase}, step {step} of {steps}"
    if step is not None:
        return f"phase {phase}, step {step}"
    return f"phase {phase}"


def last_heard(result_path: Path) -> LastHeard:
    """The newest sign of life of the run whose result.json is `result_path`: the newest of rank 0's
    heartbeat (launcher mode), its logs and its result file; what it was doing is the heartbeat's
    phase where there is one, else which file that was."""
    run_dir = result_path.parent
    beat: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads((run_dir / "rank0.progress").read_text(errors="replace"))
        beat = loaded if isinstance(loaded, dict) else {}
    files = [
        (result_path, "its result.json's last write"),
        (run_dir.with_name(run_dir.name.removesuffix("_results") + ".log"), "its log's last line"),
        *((p, "its rank logs' last line") for p in sorted(run_dir.glob("rank*.log"))),
    ]
    newest: tuple[float, str] | None = None
    for path, what in files:
        with contextlib.suppress(OSError):
            mtime = path.stat().st_mtime
            if newest is None or mtime > newest[0]:
                newest = (mtime, what)
    if isinstance(beat.get("time"), int | float):
        # the phase says more than a file's time; a line logged after the last beat is later news
        return LastHeard(max(float(beat["time"]), newest[0] if newest else 0.0), _phase(beat))
    if newest is None:
        return LastHeard(0.0, "nothing")
    return LastHeard(*newest)


def quiet_allowance_s(data: Mapping[str, Any]) -> float:
    """How long a live run may stay silent: the launcher's quiet limit for the run's collective
    timeout, and the time to rewrite the result."""
    from ..launch.diagnose import quiet_limit_s

    session = ((data.get("config") or {}).get("session")) or {}
    timeout = session.get("timeout") if isinstance(session, dict) else None
    timeout = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else DEFAULT_TIMEOUT_S
    return quiet_limit_s(timeout) + REWRITE_SLACK_S


@dataclass(frozen=True)
class RunningState:
    """A "running" result, judged: still running in a live session, or left behind by a dead one."""

    alive: bool
    heard: LastHeard
    why: str
    """How it was told: 'session pid 123 on host h is gone', 'no sign of life for 2 h', ..."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "alive": self.alive,
            "last_heard_at": self.heard.when(),
            "last_heard": self.heard.what,
            "why": self.why,
        }


def judge_running(result_path: Path, data: Mapping[str, Any], now: float | None = None) -> RunningState:
    """Whether the session that wrote this "running" result is still there to finish it."""
    heard = last_heard(result_path)
    owner = (data.get("metadata") or {}).get("session")
    alive = session_alive(owner) if isinstance(owner, dict) else None
    if alive is not None:
        who = f"pid {owner['pid']} on {owner['host']}"
        return RunningState(alive, heard, f"its session ({who}) is {'alive' if alive else 'gone'}")
    quiet = (time.time() if now is None else now) - heard.at
    allowance = quiet_allowance_s(data)
    where = f"on {owner['host']}, not this host" if isinstance(owner, dict) and owner.get("host") else ""
    if quiet > allowance:
        limit = _duration(allowance)
        why = f"no sign of life for {_duration(quiet)}, longer than a live run is quiet ({limit})"
        return RunningState(False, heard, f"its session {where}: {why}" if where else why)
    held = f"the session that runs it is {where}" if where else "no session recorded to ask"
    return RunningState(
        True, heard, f"{held}; quiet for {_duration(quiet)}, which a live run may be ({_duration(allowance)})"
    )


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"
