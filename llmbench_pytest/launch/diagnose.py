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


def read_sequences(paths: list[Path]) -> dict[int, int]:
    """Rank -> collectives it has issued on its training group (worker/beacon.py's rank<k>.seq);
    ranks without a readable file are left out."""
    out = {}
    for rank, path in enumerate(paths):
        try:
            out[rank] = int(json.loads(path.read_text())["seq"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def behind(seqs: dict[int, int]) -> list[int]:
    """The ranks that issued fewer collectives than the others (empty when all agree): the group
    waits for them inside a collective."""
    if len(seqs) < 2 or min(seqs.values()) == max(seqs.values()):
        return []
    low = min(seqs.values())
    return sorted(r for r, s in seqs.items() if s == low)


def _sequence_note(rank: int, seqs: dict[int, int]) -> str:
    others = sorted({s for r, s in seqs.items() if r != rank})
    return (
        f"it stopped first: it issued {seqs[rank]} collectives on the training group where the others "
        f"issued {', '.join(map(str, others))}, so they wait for it inside a collective"
    )


def hang(
    rank_logs: list[Path],
    quiet: list[tuple[int, float, str]],
    limit: float,
    warm: bool = False,
    seqs: dict[int, int] | None = None,
    everyone: list[tuple[int, float, str]] | None = None,
) -> Measurement:
    """The quiet ranks, the one that stopped first named first: the rank behind in the group's
    sequence of collectives (its peers wait for it), else the one quiet longest. `everyone`: every
    rank's (rank, seconds quiet, last message), so that a rank behind in the sequence is named even
    when it went quiet a moment after the one that crossed the limit first (seen on 2x H200: the
    hung rank 1's heartbeat was a fraction of a second younger than its waiting peer's)."""
    seqs = seqs or {}
    late = behind(seqs)
    named = {q[0] for q in quiet}
    quiet = [*quiet, *(q for q in everyone or [] if q[0] in late and q[0] not in named)]
    quiet = sorted(quiet, key=lambda q: (q[0] not in late, -q[1]))
    parts = []
    for rank, seconds, message in quiet:
        log = rank_logs[rank]
        where = ""
        if warm and message == "never started":
            where = " (a warm rank that never took up this configuration: it was stuck in the previous one)"
        first = f"; {_sequence_note(rank, seqs)}" if rank in late else ""
        parts.append(
            f"rank {rank} made no progress for {seconds:.0f} s (limit {limit:.0f} s; last: {message!r})"
            f"{where}{first}; last lines of {log.name}:\n{tail(log)}"
        )
    return Measurement(
        status="error",
        error="hang: " + "\n".join(parts) + "\nthe group was ended (SIGTERM, then SIGKILL).",
        failed_ranks=[q[0] for q in quiet],
    )


_VICTIM = re.compile(r"timed out|timeout", re.I)
"""What a rank's collective raises when the peer it waits for never came."""


def is_victim(error: str) -> bool:
    """A failure that is the rank's peers' doing: a collective that timed out or lost its peer."""
    return bool(_LOST_PEER.search(error) or _VICTIM.search(error))


def reported_failure(
    failures: dict[int, dict[str, Any]], seqs: dict[int, int], rank_logs: list[Path], waited: float
) -> Measurement:
    """The run's outcome from the failures ranks reported (worker/beacon.py's rank<k>.failed) while
    the others went on waiting: the first rank that failed on its own, with its status and message;
    where every report is a collective timing out, the rank behind in the sequence hung."""
    order = sorted(failures, key=lambda r: failures[r].get("time", 0.0))
    own = [r for r in order if not is_victim(str(failures[r].get("error", "")))]
    ended = (
        f"\n(reported by the rank at once; the group was ended {waited:.0f} s later, while its peers "
        "still waited for it in a collective)"
    )
    if own:
        first = own[0]
        return Measurement(
            status=str(failures[first].get("status", "error")),
            error=str(failures[first].get("error", "")) + ended,
            failed_ranks=[first, *(r for r in order if r != first)],
        )
    late = [r for r in behind(seqs) if r not in failures]
    if not late:
        first = order[0]
        return Measurement(
            status="error", error=str(failures[first].get("error", "")) + ended, failed_ranks=order
        )
    rank = late[0]
    waiting = "; ".join(f"rank {r}: {failures[r].get('error', '')}" for r in order)
    log = rank_logs[rank]
    return Measurement(
        status="error",
        error=f"hang: rank {rank} stopped: {_sequence_note(rank, seqs)}; last lines of {log.name}:\n"
        f"{tail(log)}\nwhile waiting for it: {waiting}\nthe group was ended (SIGTERM, then SIGKILL).",
        failed_ranks=[*late, *order],
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
