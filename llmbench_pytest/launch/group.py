"""One torchrun group that serves configurations: its agent process, its directory of jobs.

Standard library only (torch runs in the children). The group is started with torchrun's own
c10d rendezvous on a free local port (`--standalone`), in its own process session so that an
interrupt or a hang can end every process of it, and with a parent-death signal so that it ends
with this process even when this process is SIGKILLed (config/lifeline.py). The ranks
(worker/main.py) take job-0001.json, job-0002.json, ... from the group's directory in order; a
job marked "last", or a "stop" job, ends them. torchrun's own output goes to agent.log there;
the launcher copies each configuration's share of it into that configuration's log.

On a CPU the agent is llmbench's (worker/agent.py: torchrun's agent, whose ranks are forks of it)
and is itself a fork of a server that imported torch and the models once (launch/forkserver.py),
tied to this process instead of a parent-death signal; on a GPU, and where the server will not
fork it, the agent is `python -m torch.distributed.run`, a new process.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..config import host_share
from ..config.lifeline import LAUNCHER_PID_ENV, with_parent_death_signal
from ..config.ranks import RANK_IMPORTS
from ..results.storage import write_json_atomic
from . import forkserver

KILL_GRACE_S = 5.0
STOP_GRACE_S = 15.0
GROUPS_DIR = ".llmbench-ranks"
RANKS_ENV = "LLMBENCH_RANKS"
AGENT_MODULE = "llmbench_pytest.worker.agent"
_numbers = itertools.count(1)


def job_path(group_dir: Path, seq: int) -> Path:
    return group_dir / f"job-{seq:04d}.json"  # worker/main.py reads it; kept in step by tests


def command(world_size: int, group_dir: Path, device: str = "cpu") -> list[str]:
    return [sys.executable, "-m", agent_module(device), *agent_args(world_size, group_dir)]


def agent_args(world_size: int, group_dir: Path) -> list[str]:
    """torchrun's arguments, whichever agent takes them (worker/agent.py takes the same)."""
    return [
        "--standalone",  # c10d rendezvous on a free localhost port, chosen by torchrun
        f"--nproc_per_node={world_size}",
        "--max-restarts=0",
        # notice a dead rank, and the last rank's exit at the session's end, within 0.1 s, not five:
        # a poll is a waitpid per rank
        "--monitor-interval=0.1",
        "-m",
        "llmbench_pytest.worker.main",
        "--group-dir",
        str(group_dir),
    ]


def agent_module(device: str) -> str:
    """torchrun itself on a GPU; on a Linux CPU torchrun's agent in a process that forks the ranks
    from itself after importing what they import (worker/agent.py; macOS's system libraries do not
    promise to survive a fork). LLMBENCH_RANKS=exec starts CPU ranks as new processes too."""
    linux = sys.platform.startswith("linux")
    if device == "cpu" and linux and os.environ.get(RANKS_ENV, "fork") != "exec":
        return AGENT_MODULE
    return "torch.distributed.run"


_server_lock = threading.Lock()


def _agent_server() -> forkserver.Client:
    """The server CPU agents are forked from (one per process: lanes' threads ask at once)."""
    with _server_lock:
        return _the_agent_server()


@functools.cache
def _the_agent_server() -> forkserver.Client:
    """Where CPU agents are forked from: the server LLMBENCH_FORKSERVER names (one a harness shares
    among its sessions: the plugin's tests do), else one of this process's own, started at its
    first CPU group; later groups then import nothing."""
    given = os.environ.get(forkserver.ENV)
    if given:
        return forkserver.Client(given)
    folder = Path(tempfile.mkdtemp(prefix="llmbench-agents-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return forkserver.Client.start(folder, [AGENT_MODULE, *RANK_IMPORTS])


def _new_process(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            with_parent_death_signal(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: we end all of it, and only it
            env=env,
        )


def _forked_agent(argv: list[str], env: dict[str, str], log: Path) -> forkserver.Forked | None:
    """The agent as a fork of the server, in a session of its own and tied to this process (it
    and its ranks die with it); None where the server would not fork it (said in the log), and
    the caller starts a new process."""
    try:
        return _agent_server().spawn(AGENT_MODULE, argv, os.getcwd(), env, log, log, append=True, tied=True)
    except forkserver.Refused as exc:
        with open(log, "a") as fh:
            fh.write(f"llmbench: the agent starts as a new process: {exc}\n")
        return None


class RankGroup:
    """A started torchrun group of `world_size` ranks on `device`, collectives timing out after
    `timeout_s`: the key under which the launcher may give it another configuration."""

    def __init__(
        self,
        world_size: int,
        device: str,
        timeout_s: float,
        root: Path,
        lane_env: dict[str, str] | None = None,
    ) -> None:
        self.key = (world_size, device, timeout_s)
        self.world_size = world_size
        root.mkdir(parents=True, exist_ok=True)
        self.name = f"g{next(_numbers)}-ws{world_size}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-{self.name}-", dir=root))
        self.agent_log = self.dir / "agent.log"
        self.posted = 0
        self.leaving = False
        """A "stop" job was posted: the ranks are on their way out."""
        self.started = time.monotonic()
        # each GPU rank's share of the host's cores and threads (config/host_share.py), or of its
        # lane's, with the lane's GPUs (launch/lanes.py)
        share = (
            lane_env if lane_env is not None else host_share.group_env(dict(os.environ), world_size, device)
        )
        env = {**os.environ, LAUNCHER_PID_ENV: str(os.getpid()), **share}
        forked = None
        if agent_module(device) == AGENT_MODULE:
            forked = _forked_agent(agent_args(world_size, self.dir), env, self.agent_log)
        if forked is not None:
            self.proc: subprocess.Popen[bytes] | forkserver.Forked = forked
        else:
            self.proc = _new_process(command(world_size, self.dir, device), env, self.agent_log)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def post(self, job: dict[str, Any]) -> int:
        """Hand the ranks their next job; returns its number (1 for the group's first)."""
        self.posted += 1
        write_json_atomic(job_path(self.dir, self.posted), job)
        return self.posted

    def agent_output(self, since: int = 0) -> bytes:
        try:
            with open(self.agent_log, "rb") as fh:
                fh.seek(since)
                return fh.read()
        except OSError:
            return b""

    def log_size(self) -> int:
        try:
            return self.agent_log.stat().st_size
        except OSError:
            return 0

    def ask_to_leave(self) -> None:
        """Post the "stop" job and return: the ranks leave (they finish their last job first) while
        this process does its own last work; `stop` then waits. A rank's exit frees what it held,
        which takes seconds where it pinned host memory (about 3.5 s for 13.5 GB on 1x H100,
        tools/gpu/pin_speed.py)."""
        if self.alive and not self.leaving:
            self.post({"stop": True})
            self.leaving = True

    def stop(self) -> None:
        """Ask the ranks to leave (they finish their last job first), then end what is left."""
        if self.alive:
            self.ask_to_leave()
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        self.end()

    def end(self) -> None:
        """SIGTERM the whole process session, then SIGKILL what is left after a grace period; the
        ranks (sessions of their own) die with the agent by their parent-death signal."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=KILL_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # the agent is gone; make sure none of its process group outlived it
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def remove(self) -> None:
        """The job files and agent log, once every configuration's share was copied out."""
        shutil.rmtree(self.dir, ignore_errors=True)
