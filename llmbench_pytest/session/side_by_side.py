"""Side by side: the next configurations of a world size train on the node's idle GPUs while
pytest is still at an earlier one (launch/lanes.py says which may share the node, and where).

pytest runs its tests one after another, and each benchmark test asks for its configuration's
measurement (session/fixture.py) before it checks it. When a test asks, every idle lane of that
world size starts the next configurations of the plan that may share the node, each lane in its
own warm torchrun group (launch/launcher.RankPool with the lane's GPUs and cores); the asking test
waits only for its own. When pytest reaches a configuration that already ran, its measurement is
waiting. A configuration that must run alone (lanes.alone_reason), and a change of world size,
first wait for every lane and let the lanes' ranks leave, so that no idle rank holds a GPU the
next configuration needs (the launcher's rule of one group at a time, per GPU).

Everything that touches the display, the result files and the plan runs in pytest's thread; a
lane's thread only runs its pool and keeps the latest heartbeat.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..launch.lanes import Lane, alone_reason, lane_count, lanes
from ..launch.launcher import Launch, RankPool

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..config.spec import RunSpec
    from ..results.measurement import Measurement
    from ..results.storage import RunPaths
    from .progress import Progress, Quiet

log = logging.getLogger("llmbench")
POLL_S = 0.05
JOIN_S = 30.0
"""How long closing waits for a lane's thread once its ranks were ended."""


@dataclass
class Job:
    """One configuration on a lane: where its files go, and what came back."""

    nodeid: str
    spec: RunSpec
    lane: Lane
    paths: RunPaths | None
    meta: dict[str, Any]
    launch: Launch
    started: float = 0.0
    """monotonic seconds"""
    ended: float | None = None
    ended_at: str | None = None
    """when it ended, as result.json writes times"""
    measurement: Measurement | None = None
    error: BaseException | None = None
    beat: dict[str, Any] | None = None
    """rank 0's latest heartbeat (the lane's thread writes it, pytest's reads it)"""
    told_end: bool = False
    stopped: bool = False
    """ended by the session (an interrupt, a stop), not by itself: its figures are not its own"""
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def label(self) -> str:
        return self.nodeid.rsplit("::", 1)[-1]


class _Runner:
    """A lane: its warm ranks, and the one thread that starts them and waits on each job. One
    thread for the lane's life, not one per job: the kernel sends torchrun's parent-death signal
    when the *thread* that started it exits (prctl(2)), which would end the warm ranks after
    every job."""

    def __init__(self, lane: Lane, pool: RankPool, timeout_s: float, repo_dir: str) -> None:
        self.lane = lane
        self.pool = pool
        self.timeout_s = timeout_s
        self.repo_dir = repo_dir
        self.job: Job | None = None
        self.jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"llmbench {lane.label}", daemon=True)
        self.thread.start()

    @property
    def busy(self) -> bool:
        return self.job is not None and not self.job.done.is_set()

    def start(self, job: Job) -> None:
        self.job = job
        job.started = time.monotonic()
        self.jobs.put(job)

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            self._run(job)

    def _run(self, job: Job) -> None:
        def beat(event: dict[str, Any]) -> None:
            job.beat = event

        try:
            job.measurement = self.pool.run(job.spec, job.launch, self.timeout_s, self.repo_dir, beat)
        except BaseException as exc:  # handed to pytest's thread, which raises it there
            job.error = exc
        finally:
            job.ended = time.monotonic()
            job.ended_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            job.done.set()

    def close(self, graceful: bool) -> None:
        """Graceful (its job has ended: SideBySide._close_runners waits): the ranks leave by
        themselves; else end them now. For good either way: no group starts in this pool after it."""
        self.pool.close(graceful=graceful, final=True)
        if not graceful and self.job is not None:
            self.job.done.wait(JOIN_S)  # the ranks are gone: the thread reports a crash at once
        self.jobs.put(None)
        self.thread.join(JOIN_S)


class SideBySide:
    """The session's lanes: which configurations they take, and running them ahead of pytest."""

    def __init__(
        self,
        plan: list[tuple[str, RunSpec]],
        setting: str,
        device: str,
        gpu_ids: list[str],
        cores: list[int],
        new_pool: Callable[[dict[str, str]], RankPool],
        prepare: Callable[[str, RunSpec], tuple[RunPaths | None, dict[str, Any]]],
        free_node: Callable[[], None],
        timeout_s: float,
        repo_dir: str,
    ) -> None:
        self.plan = plan
        """pytest's order of the configurations that will train: (nodeid, spec)"""
        self.setting, self.device, self.gpu_ids, self.cores = setting, device, gpu_ids, cores
        self.new_pool = new_pool
        self.prepare = prepare
        """claims a configuration's result paths and writes its placeholder (session/fixture.py)"""
        self.free_node = free_node
        """ends the session's own group (the one that runs configurations alone)"""
        self.timeout_s, self.repo_dir = timeout_s, repo_dir
        self.sharing = Counter(spec.world_size for _, spec in plan if alone_reason(spec) is None)
        """configurations of each world size that may share the node"""
        self.jobs: dict[str, Job] = {}
        self.settled: set[str] = set()
        """configurations whose result.json their test wrote (measured, failed or interrupted)"""
        self.runners: list[_Runner] = []
        self.world_size: int | None = None
        self.interrupted = False
        """A Ctrl-C (or SIGTERM) reached pytest's thread here: every lane was ended, for good."""

    def lanes_at(self, world_size: int) -> int:
        """Lanes at `world_size`: as many as the GPUs allow, no more than its configurations that
        may share, and none (1) where fewer than two may."""
        count = min(
            lane_count(world_size, self.device, len(self.gpu_ids), self.setting), self.sharing[world_size]
        )
        return count if count > 1 else 1

    def takes(self, spec: RunSpec) -> bool:
        """Whether `spec` runs on a lane: its world size has lanes, and it may share."""
        return self.lanes_at(spec.world_size) > 1 and alone_reason(spec) is None

    def at_once(self, spec: RunSpec) -> int:
        """How many configurations train at once while `spec` does (for the ETA)."""
        return self.lanes_at(spec.world_size) if self.takes(spec) else 1

    def record(self, nodeid: str, spec: RunSpec) -> dict[str, Any] | None:
        """result.json's side_by_side: the lane and what ran beside it; why it ran alone where its
        world size had lanes; None where it had none."""
        job = self.jobs.get(nodeid)
        if job is None:
            reason = alone_reason(spec)
            return {"alone": reason} if reason and self.lanes_at(spec.world_size) > 1 else None
        end = job.ended if job.ended is not None else time.monotonic()
        beside = [
            other.label
            for other in self.jobs.values()
            if other is not job and other.started < end and (other.ended is None or other.ended > job.started)
        ]
        lane = job.lane.to_dict()
        if "OMP_NUM_THREADS" in os.environ:
            lane["cores"] = None  # the user's threads, not bound to the lane's cores (host_share)
        return {**lane, "beside": beside}

    def begin(self, nodeid: str, spec: RunSpec, progress: Progress | Quiet) -> Job:
        """`nodeid`'s job on a lane: found already run ahead, or started now (once a lane is
        free), the other idle lanes filled with the configurations after it. A job the session
        had stopped (another test's interrupt, an error while waiting) runs again. An interrupt
        ends every lane; after one, nothing starts (where pytest went on regardless, this test is
        interrupted too)."""
        if self.interrupted:
            raise KeyboardInterrupt("the session was interrupted: no configuration starts after it")
        try:
            job = self.jobs.get(nodeid)
            if job is not None and job.stopped:
                del self.jobs[nodeid]
                job = None
            if job is None:
                self._enter(spec.world_size)
                runner = self._free_runner(progress)
                job = self._start(runner, nodeid, spec, progress)
            self._fill(progress)
        except (KeyboardInterrupt, SystemExit):
            self._end_on_interrupt()
            raise
        return job

    def wait(self, job: Job, progress: Progress | Quiet) -> Job:
        """Until `job` has ended, idle lanes taking the next configurations meanwhile. An
        interrupt ends every lane; any other exception here (a per-test timeout) ends this job's
        lane only, and the others go on."""
        try:
            while not job.done.wait(POLL_S):
                self._tell(progress, job)
                self._fill(progress)
            self._tell(progress, job)
        except (KeyboardInterrupt, SystemExit):
            self._end_on_interrupt()
            raise
        except BaseException:
            self._stop(job)
            raise
        return job

    def _end_on_interrupt(self) -> None:
        """Every lane ends now, for good. Nothing that goes wrong on the way may take the
        interrupt's place (the caller raises it): an error instead would fail just this test,
        and pytest would go on to the next configurations, started on lanes half closed. The
        lanes an error left are ended at the session's end (settle_ahead, state.shutdown)."""
        self.interrupted = True
        try:
            self.close(graceful=False)
        except Exception:
            log.exception("llmbench: ending the lanes after an interrupt")

    def _stop(self, job: Job) -> None:
        job.stopped = job.stopped or not job.done.is_set()
        for runner in self.runners:
            if runner.job is job:
                runner.pool.close(graceful=False)  # the next job on this lane starts fresh ranks
                job.done.wait(JOIN_S)

    def clear(self, progress: Progress | Quiet) -> None:
        """The next configuration has the node to itself: wait for every lane, then their ranks leave."""
        try:
            for runner in self.runners:
                while runner.job is not None and not runner.job.done.wait(POLL_S):
                    self._tell(progress, None)
            self._tell(progress, None)
        except (KeyboardInterrupt, SystemExit):
            self._end_on_interrupt()
            raise
        except BaseException:
            self.close(graceful=False)
            raise
        self._close_runners(graceful=True)
        self.world_size = None

    def let_go(self) -> None:
        for runner in self.runners:
            runner.pool.let_go()

    def close(self, graceful: bool = True) -> None:
        """End every lane (graceful: the ranks leave by themselves after their job; else now, and a
        job still running is marked stopped: what its group's end leaves behind is no crash)."""
        if not graceful:
            for job in self.jobs.values():
                job.stopped = job.stopped or not job.done.is_set()
        self._close_runners(graceful)

    def unsettled(self) -> list[Job]:
        """Jobs whose test never wrote their result.json: run ahead for a test pytest did not reach
        (-x, an interrupt), or interrupted before the test could."""
        return [j for n, j in self.jobs.items() if n not in self.settled]

    def _close_runners(self, graceful: bool) -> None:
        if graceful:  # every lane's ranks leave at once (a rank's exit frees pinned memory: seconds)
            for runner in self.runners:
                if runner.job is not None:
                    runner.job.done.wait()
                runner.pool.let_go()
        while self.runners:  # each is forgotten once closed: an interrupt here leaves the rest to close
            self.runners[0].close(graceful)
            self.runners.pop(0)

    def _enter(self, world_size: int) -> None:
        """Lanes of `world_size`: the session's own group and other world sizes' lanes end first."""
        if self.world_size == world_size and self.runners:
            return
        self._close_runners(graceful=True)
        self.free_node()
        env = dict(os.environ)
        count = self.lanes_at(world_size)
        self.runners = [
            _Runner(lane, self.new_pool(lane.env(env, self.device)), self.timeout_s, self.repo_dir)
            for lane in lanes(world_size, count, self.gpu_ids, self.cores)
        ]
        self.world_size = world_size

    def _free_runner(self, progress: Progress | Quiet) -> _Runner:
        while True:
            for runner in self.runners:
                if not runner.busy:
                    return runner
            time.sleep(POLL_S)
            self._tell(progress, None)

    def _start(self, runner: _Runner, nodeid: str, spec: RunSpec, progress: Progress | Quiet) -> Job:
        paths, meta = self.prepare(nodeid, spec)
        run_dir = paths.directory if paths is not None else None
        log = paths.log if paths is not None else None
        assert run_dir is not None and log is not None, "a launcher session's runs have paths"
        launch = Launch(run_dir=run_dir, log_path=log, world_size=spec.world_size)
        job = Job(nodeid, spec, runner.lane, paths, meta, launch)
        self.jobs[nodeid] = job
        runner.start(job)
        progress.config_began(nodeid, spec, worker=runner.lane.label)
        return job

    def _fill(self, progress: Progress | Quiet) -> None:
        """Every idle lane takes a configuration of its world size that may share, from the far end
        of pytest's order: pytest works the world size from the front, the other lanes from the
        back, where each benchmark puts its heaviest strategies (ZeRO-3 after DDP: its window, on a
        host-bound step, runs to the time budget), so that they start early instead of last."""
        for runner in self.runners:
            if runner.busy:
                continue
            left = [
                (n, s)
                for n, s in self.plan
                if n not in self.jobs and s.world_size == self.world_size and self.takes(s)
            ]
            if not left:
                return
            self._start(runner, *left[-1], progress)

    def _tell(self, progress: Progress | Quiet, current: Job | None) -> None:
        """The display learns of ends as they happen (its ETA learns from each run's own wall
        time), and the configuration pytest waits for shows its heartbeat."""
        for job in self.jobs.values():
            if job.done.is_set() and not job.told_end:
                job.told_end = True
                ok = job.measurement is not None and job.measurement.ok
                progress.config_ended(job.nodeid, ok, job.ended)
        if current is not None and current.beat is not None:
            beat, current.beat = current.beat, None
            progress.on_progress(beat)
