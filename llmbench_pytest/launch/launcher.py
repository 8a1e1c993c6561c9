"""Launcher mode: run one configuration as its own torchrun group and bring back rank 0's numbers.

Standard library only (torch runs in the children). The group is started with torchrun's own
c10d rendezvous on a free local port (`--standalone`), in its own process session so that an
interrupt or a hang can end every process of it, grandchildren included. While it runs, the
launcher watches each rank's progress file: a rank that has been quiet for longer than the
limit (longer than the collective timeout, so a timed-out collective reports itself first) is
a hang, and the whole group is ended. A group that dies is reported with the rank, its exit
code or signal, and the last lines of its log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..results.measurement import Measurement

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ..config.spec import RunSpec

MEASUREMENT_FILE = "measurement.json"  # worker/main.py writes it; kept in step by tests
JOB_FILE = "job.json"
POLL_S = 0.25
KILL_GRACE_S = 5.0
LOG_TAIL_LINES = 15


def quiet_limit_s(timeout_s: float) -> float:
    """How long a rank may make no progress before it counts as hung: beyond the collective
    timeout, so that a rank stuck in a collective raises (and says where) before it is killed."""
    return timeout_s + max(10.0, timeout_s / 4)


@dataclass
class Launch:
    """Where a launched run keeps its files, and what the launcher saw."""

    run_dir: Path
    log_path: Path
    world_size: int
    timings: dict[str, float] = field(default_factory=dict)
    """spawn_to_first_progress_sec (process start-up), total_sec."""

    def rank_log(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.log"

    def progress(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.progress"


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join("    " + ln for ln in kept) or "(empty log)"


def command(world_size: int, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # c10d rendezvous on a free localhost port, chosen by torchrun
        f"--nproc_per_node={world_size}",
        "--max-restarts=0",
        "--monitor-interval=0.5",  # notice a dead rank within half a second, not five
        "-m",
        "llmbench_pytest.worker.main",
        "--run-dir",
        str(run_dir),
    ]


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole process session, then SIGKILL what is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the agent is gone; make sure none of its workers outlived it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def read_heartbeat(path: Path) -> dict[str, Any]:
    """A rank's heartbeat (worker/progress.py): a JSON object with at least "message"; a file
    in any other form is its own message. Raises OSError when there is none."""
    text = path.read_text(errors="replace")
    try:
        beat = json.loads(text)
    except ValueError:
        return {"message": text}
    return beat if isinstance(beat, dict) else {"message": text}


def _quiet_ranks(launch: Launch, started: float, limit: float) -> list[tuple[int, float, str]]:
    """Ranks whose last progress is older than `limit`: (rank, seconds quiet, last message)."""
    now = time.time()
    quiet = []
    for rank in range(launch.world_size):
        path = launch.progress(rank)
        try:
            last = path.stat().st_mtime
            message = str(read_heartbeat(path).get("message", ""))
        except OSError:
            last, message = started, "never started"
        if now - last > limit:
            quiet.append((rank, now - last, message))
    return quiet


_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank.*?\n\s*exitcode\s*:\s*(-?\d+)", re.S)


def _dead_ranks(launch: Launch) -> list[tuple[int, int]]:
    """(rank, exit code) of the workers torchrun reported as failed, first failure first."""
    try:
        text = launch.log_path.read_text(errors="replace")
    except OSError:
        return []
    found = [(int(r), int(c)) for r, c in _FAILURE.findall(text)]
    root = text.rfind("Root Cause")
    if root >= 0:
        first = _FAILURE.search(text, root)
        if first:
            found.insert(0, (int(first.group(1)), int(first.group(2))))
    found = list(dict.fromkeys(found))
    # torchrun stops the survivors with SIGTERM; under load its monitor can see one of those
    # first, so a rank that died otherwise is the cause
    return sorted(found, key=lambda rc: rc[1] == -signal.SIGTERM)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def write_job(run_dir: Path, spec: RunSpec, timeout_s: float, repo_dir: str) -> None:
    job: dict[str, Any] = {"spec": spec.to_dict(), "timeout_s": timeout_s, "repo_dir": repo_dir}
    (run_dir / JOB_FILE).write_text(json.dumps(job, indent=2))


def _forward_progress(
    launch: Launch, on_progress: Callable[[dict[str, Any]], None] | None, last: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Hand rank 0's heartbeat to the progress display when it changed; returns the latest."""
    if on_progress is None:
        return last
    try:
        beat = read_heartbeat(launch.progress(0))
    except OSError:
        return last
    if beat != last:
        on_progress(beat)
    return beat


def run_group(
    spec: RunSpec,
    launch: Launch,
    timeout_s: float,
    repo_dir: str,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> Measurement:
    """Start the group, watch it, and return rank 0's measurement or what went wrong.
    `on_progress` gets rank 0's heartbeat (a dict) from this thread whenever it changed."""
    write_job(launch.run_dir, spec, timeout_s, repo_dir)
    limit = quiet_limit_s(timeout_s)
    started = time.time()
    t0 = time.monotonic()
    first_progress: float | None = None
    beat: dict[str, Any] | None = None
    with open(launch.log_path, "ab") as log:
        proc = subprocess.Popen(
            command(spec.world_size, launch.run_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: we end all of it, and only it
            env={**os.environ, "LLMBENCH_RUN_DIR": str(launch.run_dir)},
        )
        try:
            while proc.poll() is None:
                if first_progress is None and launch.progress(0).exists():
                    first_progress = time.monotonic() - t0
                beat = _forward_progress(launch, on_progress, beat)
                quiet = _quiet_ranks(launch, started, limit)
                if quiet:
                    _end_group(proc)
                    launch.timings.update(total_sec=time.monotonic() - t0)
                    return _hang(launch, quiet, limit)
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C, SIGTERM, or anything else: no worker outlives us
            _end_group(proc)
            raise
    launch.timings.update(total_sec=time.monotonic() - t0)
    if first_progress is not None:
        launch.timings["spawn_to_first_progress_sec"] = first_progress
    measured = launch.run_dir / MEASUREMENT_FILE
    if measured.exists():
        return Measurement(**json.loads(measured.read_text()))
    return _crash(launch, proc.returncode)


def _hang(launch: Launch, quiet: list[tuple[int, float, str]], limit: float) -> Measurement:
    quiet.sort(key=lambda q: -q[1])
    parts = []
    for rank, seconds, message in quiet:
        parts.append(
            f"rank {rank} made no progress for {seconds:.0f} s (limit {limit:.0f} s; last: {message!r}); "
            f"last lines of {launch.rank_log(rank).name}:\n{tail(launch.rank_log(rank))}"
        )
    return Measurement(
        status="error",
        error="hang: " + "\n".join(parts) + "\nthe group was ended (SIGTERM, then SIGKILL).",
        failed_ranks=[q[0] for q in quiet],
    )


def _crash(launch: Launch, returncode: int | None) -> Measurement:
    dead = _dead_ranks(launch)
    if not dead:
        return Measurement(
            status="error",
            error=f"the group exited with {_describe_exit(returncode or 0)} before rank 0 reported; "
            f"last lines of {launch.log_path.name}:\n{tail(launch.log_path)}",
        )
    rank, code = dead[0]
    return Measurement(
        status="error",
        error=f"rank {rank} died ({_describe_exit(code)}); last lines of {launch.rank_log(rank).name}:\n"
        f"{tail(launch.rank_log(rank))}",
        failed_ranks=[r for r, _ in dead],
    )
