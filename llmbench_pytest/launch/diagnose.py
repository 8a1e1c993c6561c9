"""What the launcher tells the user when ranks go quiet or die: the rank, where it was, its last lines.

Standard library only. A rank's heartbeat file (worker/progress.py) holds a JSON object with the
message of its last record and its progress fields; its age says how long the rank has been quiet.
torchrun's agent log holds its failure summary, from which the dead rank and its exit code come.
"""

from __future__ import annotations

import json
import re
import signal
import time
from typing import TYPE_CHECKING, Any

from ..results.measurement import Measurement

if TYPE_CHECKING:
    from pathlib import Path

LOG_TAIL_LINES = 15


def quiet_limit_s(timeout_s: float) -> float:
    """How long a rank may make no progress before it counts as hung: beyond the collective
    timeout, so that a rank stuck in a collective raises (and says where) before it is killed."""
    return timeout_s + max(10.0, timeout_s / 4)


def read_heartbeat(path: Path) -> dict[str, Any]:
    """A rank's latest heartbeat ({"message", "time", progress fields...}); a file that is not a
    JSON object (an older worker, a torn read) reads as {"message": its text}; a missing one raises
    OSError."""
    text = path.read_text(errors="replace")
    try:
        beat = json.loads(text)
    except ValueError:
        return {"message": text}
    return beat if isinstance(beat, dict) else {"message": text}


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join("    " + ln for ln in kept) or "(empty log)"


def quiet_ranks(progress: list[Path], started: float, limit: float) -> list[tuple[int, float, str]]:
    """Ranks whose last progress is older than `limit`: (rank, seconds quiet, last message).
    `progress[k]` is rank k's heartbeat file; one not written yet counts from `started`."""
    now = time.time()
    quiet = []
    for rank, path in enumerate(progress):
        try:
            last = path.stat().st_mtime
            message = str(read_heartbeat(path).get("message", ""))
        except OSError:
            last, message = started, "never started"
        if now - last > limit:
            quiet.append((rank, now - last, message))
    return quiet


_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank.*?\n\s*exitcode\s*:\s*(-?\d+)", re.S)


def dead_ranks(agent_log: str) -> list[tuple[int, int]]:
    """(rank, exit code) of the workers torchrun reported as failed, first failure first."""
    found = [(int(r), int(c)) for r, c in _FAILURE.findall(agent_log)]
    root = agent_log.rfind("Root Cause")
    if root >= 0:
        first = _FAILURE.search(agent_log, root)
        if first:
            found.insert(0, (int(first.group(1)), int(first.group(2))))
    found = list(dict.fromkeys(found))
    # torchrun stops the survivors with SIGTERM; under load its monitor can see one of those
    # first, so a rank that died otherwise is the cause
    return sorted(found, key=lambda rc: rc[1] == -signal.SIGTERM)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def hang(
    rank_logs: list[Path], quiet: list[tuple[int, float, str]], limit: float, warm: bool = False
) -> Measurement:
    quiet = sorted(quiet, key=lambda q: -q[1])
    parts = []
    for rank, seconds, message in quiet:
        log = rank_logs[rank]
        where = ""
        if warm and message == "never started":
            where = " (a warm rank that never took up this configuration: it was stuck in the previous one)"
        parts.append(
            f"rank {rank} made no progress for {seconds:.0f} s (limit {limit:.0f} s; last: {message!r})"
            f"{where}; last lines of {log.name}:\n{tail(log)}"
        )
    return Measurement(
        status="error",
        error="hang: " + "\n".join(parts) + "\nthe group was ended (SIGTERM, then SIGKILL).",
        failed_ranks=[q[0] for q in quiet],
    )


# what a rank's collective raises when another rank of its group went away (gloo, NCCL)
_LOST_PEER = re.compile(
    r"Connection closed by peer|remote worker crash|Connection reset by peer|NCCL communicator was aborted"
    r"|ProcessGroupNCCL.*(?:abort|watchdog)",
    re.I,
)


def _lost_a_peer(log: Path) -> bool:
    return bool(_LOST_PEER.search(tail(log)))


def blame_order(dead: list[tuple[int, int]], rank_logs: list[Path]) -> list[tuple[int, int]]:
    """The dead ranks, the likely cause first. torchrun names as the root cause the first failure
    it has a record of, and a rank killed by a signal leaves none: when SIGKILL (the OOM killer, a
    scheduler) takes one rank, its peers' collectives fail a moment later with "connection closed
    by peer" and exit 1, and one of those is the failure on record. So: a rank a signal other than
    SIGTERM ended comes first, then one that failed on its own, then one that failed because a
    peer went away, and last one torchrun itself stopped with SIGTERM."""

    def rank_of(rank_code: tuple[int, int]) -> int:
        rank, code = rank_code
        if code == -signal.SIGTERM:
            return 3
        if code < 0:
            return 0
        return 2 if rank < len(rank_logs) and _lost_a_peer(rank_logs[rank]) else 1

    return sorted(dead, key=rank_of)


def crash(rank_logs: list[Path], agent_log: Path, agent_text: str, returncode: int | None) -> Measurement:
    """A group that exited before rank 0 reported: the rank that most likely failed first (see
    `blame_order`), with its log."""
    dead = blame_order(dead_ranks(agent_text), rank_logs)
    if not dead:
        return Measurement(
            status="error",
            error=f"the group exited with {describe_exit(returncode or 0)} before rank 0 reported; "
            f"last lines of {agent_log.name}:\n{tail(agent_log)}",
        )
    rank, code = dead[0]
    return Measurement(
        status="error",
        error=f"rank {rank} died ({describe_exit(code)}); last lines of {rank_logs[rank].name}:\n"
        f"{tail(rank_logs[rank])}",
        failed_ranks=[r for r, _ in dead],
    )
