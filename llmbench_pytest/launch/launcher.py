"""Launcher mode: run configurations on torchrun groups and bring back rank 0's numbers.

Standard library only (torch runs in the children). The ranks of a world size stay warm: the
group that ran one configuration takes the next one of the same world size, device and timeout,
so torchrun, imports, the CUDA context and the communicators are paid once per group, not per
configuration (worker/run.py tears each configuration down). At most one group is alive: a
different world size ends it before the next starts, so idle ranks never hold GPUs or memory
the running configuration needs. A configuration that does not end ok (out of memory, an error,
a crash, a hang) ends its group, and the next one starts fresh ranks; `--llmbench-isolate`
starts a fresh group for every configuration.

While a configuration runs, the launcher watches each rank's heartbeat file in that
configuration's result directory: a rank quiet for longer than the limit (longer than the
collective timeout, so a timed-out collective reports itself first) is a hang, and the whole
group is ended. A group that dies is reported with the rank, its exit code or signal, and the
last lines of its log. Rank 0's latest heartbeat goes to an `on_progress` callback (the
progress display) whenever it changes.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..results.measurement import Measurement
from .diagnose import (
    crash,
    hang,
    quiet_limit_s,
    quiet_ranks,
    read_heartbeat,
    read_sequences,
    reported_failure,
)
from .group import GROUPS_DIR, RankGroup

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ..config.spec import RunSpec

__all__ = ["Launch", "RankPool", "quiet_limit_s", "read_heartbeat", "run_group"]

MEASUREMENT_FILE = "measurement.json"  # worker/main.py writes it; kept in step by tests
FAILURE_GRACE_S = 3.0
"""How long the launcher lets a group whose rank reported a failure end the run by itself while
other ranks have not (they may wait in a collective for the failed rank until the timeout, 600 s by
default): ranks that fail alike (every rank out of memory at the same step) report within a
moment of each other, and then ALL_FAILED_GRACE_S applies."""
ALL_FAILED_GRACE_S = 30.0
"""The same once every rank has reported a failure: each is tearing down on its way to the run's
own outcome."""
POLL_S = 0.05
"""How often the launcher looks for the running configuration's measurement and heartbeats: each
look is a stat and a small read, and a configuration's end waits half of it on average (at 0.25 s,
4.3 s of the CPU default matrix's 46 s, 2026-11-26)."""


@dataclass
class Launch:
    """Where a launched configuration keeps its files, and what the launcher saw."""

    run_dir: Path
    log_path: Path
    world_size: int
    timings: dict[str, Any] = field(default_factory=dict)
    """ranks (fresh or warm), isolated, group, group_configuration, to_first_progress_sec, total_sec."""

    def rank_log(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.log"

    def progress(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.progress"

    def sequence(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.seq"  # worker/beacon.py writes it; kept in step by tests

    def failure(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.failed"  # worker/beacon.py writes it; kept in step by tests


class RankPool:
    """The session's torchrun groups: at most one alive, reused while configurations match it."""

    def __init__(
        self, results_dir: Path, isolate: bool = False, lane_env: dict[str, str] | None = None
    ) -> None:
        self.root = results_dir / GROUPS_DIR
        self.isolate = isolate
        self.lane_env = lane_env
        """A lane's GPUs and cores (launch/lanes.py), for every group this pool starts."""
        self.group: RankGroup | None = None
        self.served = 0
        """Configurations the current group has taken."""
        self.shut = False
        """Closed for good (`close(final=True)`): no group starts after it. A lane's pool is run
        from the lane's thread and shut from pytest's (session/side_by_side.py); the lock keeps a
        group from starting between the two, and the two threads from polling and ending the
        group's process at once: a CPU agent forked by the fork server is one socket that carries
        its exit status (forkserver.Forked), and where both threads read it, the one that lost the
        status to the other got EBADF. In pytest's thread, ending the lanes on a Ctrl-C, that error
        replaced the KeyboardInterrupt: the test failed instead, and pytest went on to the next
        configurations on lanes half closed."""
        self._lock = threading.Lock()

    def run(
        self,
        spec: RunSpec,
        launch: Launch,
        timeout_s: float,
        repo_dir: str,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Measurement:
        """Run one configuration on a warm group (or a fresh one) and return rank 0's measurement."""
        group = self._group_for((spec.world_size, spec.device, timeout_s), launch)
        job = {
            "spec": spec.to_dict(),
            "timeout_s": timeout_s,
            "repo_dir": repo_dir,
            "run_dir": str(launch.run_dir),
            "last": self.isolate,
        }
        offset = group.log_size()
        t0 = time.monotonic()
        group.post(job)
        self.served += 1
        launch.timings.update(group=group.name, group_configuration=self.served, isolated=self.isolate)
        _log_header(launch)
        try:
            measurement = _watch(group, launch, timeout_s, on_progress, self._lock)
        except BaseException:  # Ctrl-C, SIGTERM, or anything else: no rank outlives us
            with self._lock:
                group.end()
            _copy_agent_output(group, offset, launch.log_path)
            self.close(graceful=False)
            raise
        launch.timings["total_sec"] = time.monotonic() - t0
        agent_text = _copy_agent_output(group, offset, launch.log_path)
        if measurement is None:  # the group died before rank 0 reported
            logs = [launch.rank_log(r) for r in range(launch.world_size)]
            measurement = crash(logs, launch.log_path, agent_text, group.proc.returncode)
        with self._lock:
            alive = group.alive
        if not measurement.keeps_warm or self.isolate or not alive:
            self.close()  # the ranks leave by themselves after a failed, unreleased or last job
        return measurement

    def _group_for(self, key: tuple[Any, ...], launch: Launch) -> RankGroup:
        with self._lock:
            group = self.group
            warm = group is not None and group.key == key and group.alive and not group.leaving
        if group is not None and warm:
            launch.timings["ranks"] = "warm"
            return group
        self.close()
        with self._lock:
            if self.shut:
                raise PoolShut("the session ended these ranks before this configuration started")
            self.group = RankGroup(*key, root=self.root, lane_env=self.lane_env)
        self.served = 0
        launch.timings["ranks"] = "fresh"
        return self.group

    def let_go(self) -> None:
        """No more configurations will come: the current group's ranks start leaving now, and
        `close` waits for what is left of their exit."""
        with self._lock:
            if self.group is not None:
                self.group.ask_to_leave()

    def close(self, graceful: bool = True, final: bool = False) -> None:
        """End the current group: graceful lets the ranks leave by themselves first; final: for
        good (no group starts after it)."""
        with self._lock:  # held while the process ends: the lane's thread may be polling it
            self.shut = self.shut or final
            group, self.group = self.group, None
            if group is None:
                return
            if graceful:
                group.stop()
            else:
                group.end()
        group.remove()


class PoolShut(RuntimeError):
    """A configuration asked for ranks from a pool the session had already closed for good."""


def run_group(
    spec: RunSpec,
    launch: Launch,
    timeout_s: float,
    repo_dir: str,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> Measurement:
    """One configuration on a group of its own, started and ended here."""
    pool = RankPool(launch.run_dir.parent, isolate=True)
    try:
        return pool.run(spec, launch, timeout_s, repo_dir, on_progress)
    finally:
        pool.close()


def _watch(
    group: RankGroup,
    launch: Launch,
    timeout_s: float,
    on_progress: Callable[[dict[str, Any]], None] | None,
    lock: threading.Lock,
) -> Measurement | None:
    """Wait for rank 0's measurement of the configuration just posted (None: the group died
    first), or for a rank to go quiet; pass rank 0's heartbeat on whenever it changes. The
    group's process is polled and ended under the pool's `lock` (RankPool.shut says why)."""
    limit = quiet_limit_s(timeout_s)
    started, t0 = time.time(), time.monotonic()
    ranks = range(launch.world_size)
    progress = [launch.progress(r) for r in ranks]
    logs = [launch.rank_log(r) for r in ranks]
    measured = launch.run_dir / MEASUREMENT_FILE
    last: dict[str, Any] | None = None
    failed = _Failures(launch)
    while not measured.exists():
        with lock:
            alive = group.alive
        if not alive:
            if measured.exists():  # rank 0 reported, then the group ended
                break
            return None
        if failed.overdue():
            with lock:
                group.end()
            seqs = read_sequences([launch.sequence(r) for r in ranks])
            return reported_failure(failed.reports, seqs, logs, failed.waited())
        quiet = quiet_ranks(progress, started, limit)
        if quiet:
            with lock:
                group.end()
            seqs = read_sequences([launch.sequence(r) for r in ranks])
            everyone = quiet_ranks(progress, started, 0.0)
            warm = launch.timings.get("ranks") == "warm"
            return hang(logs, quiet, limit, warm=warm, seqs=seqs, everyone=everyone)
        try:
            beat = read_heartbeat(progress[0])
        except OSError:
            beat = None
        if beat is not None:
            launch.timings.setdefault("to_first_progress_sec", time.monotonic() - t0)
            if on_progress is not None and beat != last:
                on_progress(beat)
            last = beat
        time.sleep(POLL_S)
    return Measurement(**json.loads(measured.read_text()))


class _Failures:
    """The failures the ranks reported (worker/beacon.py), and whether the group has had its time to
    end the run by itself: FAILURE_GRACE_S while some ranks have not failed (they are likely waiting
    in a collective for one that did), ALL_FAILED_GRACE_S once every rank has (each is on its way
    to the run's own outcome, with every rank's figures)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.reports: dict[int, dict[str, Any]] = {}
        self.first: float | None = None

    def _read(self) -> None:
        for rank in range(self.launch.world_size):
            if rank in self.reports:
                continue
            path = self.launch.failure(rank)
            try:
                report = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(report, dict):
                self.reports[rank] = report
                self.first = self.first if self.first is not None else time.monotonic()

    def waited(self) -> float:
        return time.monotonic() - self.first if self.first is not None else 0.0

    def overdue(self) -> bool:
        self._read()
        if self.first is None:
            return False
        every = len(self.reports) == self.launch.world_size
        return self.waited() > (ALL_FAILED_GRACE_S if every else FAILURE_GRACE_S)


def _log_header(launch: Launch) -> None:
    """The configuration's own log says which ranks ran it and where their output is: torchrun's
    lines follow only when it has something to say, and a warm group's agent is quiet between
    healthy configurations (an empty log read as a lost one)."""
    t = launch.timings
    with open(launch.log_path, "a") as fh:
        fh.write(
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} torchrun group {t['group']}, {t['ranks']} ranks "
            f"(configuration {t['group_configuration']} of this group); each rank's output is in "
            f"{launch.run_dir.name}/rank<k>.log; torchrun's own output for this configuration, if "
            "any, follows\n"
        )


def _copy_agent_output(group: RankGroup, since: int, target: Path) -> str:
    """This configuration's share of torchrun's own output, appended to the configuration's log
    (created even when there is none: every result has its log beside it)."""
    text = group.agent_output(since)
    with open(target, "ab") as fh:
        fh.write(text)
    return text.decode(errors="replace")
