"""Runs inside each rank of a group the launcher started: `python -m llmbench_pytest.worker.main`.

torchrun starts one of these per rank, and each serves configuration after configuration: the
launcher writes numbered job files (job-0001.json, job-0002.json, ...) into the group's
directory, every rank takes them in order, so all ranks run the same configuration at the same
time with no further agreement. Imports, the CUDA context and the process groups are paid once
per group; between configurations run_benchmark tears the last one down (worker/run.py).

For each job a rank sends its own stdout and stderr, C++ and NCCL output included, to
rank<k>.log in that configuration's result directory, beats a progress file there, trains, and
rank 0 writes measurement.json. A run that did not end ok (out of memory, an error), or whose
teardown left memory behind (worker/memory.leftover), ends the group: the process may hold state
no teardown repairs, and the next configuration gets fresh ranks. A job marked "last"
(--llmbench-isolate, or the session's end) ends it too. Anything that escapes is recorded by
torchrun's error handler, whose summary the launcher reads.

The ranks die with the launcher: torchrun's agent is started with a parent-death signal (on a CPU,
a fork of the session's fork server, tied to pytest by a pipe: launch/forkserver.py), and each rank
sets one on itself, so a SIGKILLed pytest (the OOM killer, a CI hard kill) takes its ranks and
their GPU memory with it within moments. On a CPU this module runs in forks of the agent
(worker/agent.py), not as `python -m`.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

from ..config import host_share
from ..config.lifeline import die_with_parent, parent_gone
from ..config.ranks import rank_env
from ..config.spec import RunSpec
from ..results.storage import write_json_atomic
from . import dist
from .beacon import SequenceBeacon, report_failure, sequence_path
from .progress import ProgressFile, note, progress_path
from .run import run_benchmark

MEASUREMENT_FILE = "measurement.json"
JOB_POLL_S = 0.05


def job_path(group_dir: Path, seq: int) -> Path:
    return group_dir / f"job-{seq:04d}.json"  # launch/group.py writes it; kept in step by tests


def _own_output(path: Path) -> None:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at a rank log; the Python
    objects on them stay, so every handler follows to the new file."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _next_job(group_dir: Path, seq: int) -> dict[str, Any] | None:
    """Wait for job `seq`; None when the launcher is gone (nobody will ever write it)."""
    path = job_path(group_dir, seq)
    while not path.exists():
        if parent_gone():
            return None
        time.sleep(JOB_POLL_S)
    return json.loads(path.read_text())


def _logger(rank: int) -> logging.Logger:
    log = logging.getLogger("llmbench")
    log.setLevel(logging.DEBUG)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    to_file = logging.StreamHandler(sys.stderr)
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(logging.Formatter(f"%(asctime)s rank{rank} %(levelname)s %(message)s"))
    log.addHandler(to_file)
    return log


@record
def main(argv: list[str] | None = None, forked: bool = False) -> int:
    """`forked`: this process is a fork of the agent that imported what it needs (worker/agent.py),
    not a new interpreter (recorded as how the rank process started)."""
    die_with_parent()
    parser = argparse.ArgumentParser(description="one rank of an llmbench group (started by the launcher)")
    parser.add_argument("--group-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    env = rank_env()
    # before any thread pool starts: its threads inherit this rank's cores (config/host_share.py)
    host_share.bind_this_rank(env.local_rank, env.local_world_size)
    log = _logger(env.rank)
    born = time.monotonic()
    ctx: dist.DistContext | None = None
    seq = 0
    while (job := _next_job(args.group_dir, seq + 1)) is not None and not job.get("stop"):
        seq += 1
        run_dir = Path(job["run_dir"])
        _own_output(run_dir / f"rank{env.rank}.log")
        beat = ProgressFile(progress_path(run_dir, env.rank))
        log.addHandler(beat)
        try:
            spec = RunSpec.from_dict(job["spec"])
            log.info("rank %d of %d on %s (pid %d, configuration %d of this process, up %.1f s): %s",
                     env.rank, env.world_size, os.uname().nodename, os.getpid(), seq,
                     time.monotonic() - born, spec.name)  # fmt: skip
            if ctx is None:
                ctx = dist.init(env, spec.device, float(job["timeout_s"]))
            with SequenceBeacon(sequence_path(run_dir, env.rank), ctx):
                measurement = run_benchmark(
                    spec, ctx, log, job.get("repo_dir"), trace_dir=run_dir,
                    on_failure=functools.partial(report_failure, run_dir, env.rank),
                )  # fmt: skip
            measurement.timing["rank_process"] = {
                "configuration": seq,
                "up_sec": time.monotonic() - born,
                "start": "fork" if forked else "exec",
            }
            if env.rank == 0:
                write_json_atomic(run_dir / MEASUREMENT_FILE, measurement.to_dict())
            note(log, logging.INFO, {"phase": "done"}, "done: %s", measurement.status)
        finally:
            log.removeHandler(beat)
        if not measurement.keeps_warm or job.get("last"):
            break  # failed, or kept memory a fresh rank would not hold: the next job gets fresh ranks
    if job is None:
        return 1  # the launcher is gone: nobody waits for a clean exit, or for the peers
    if ctx is not None:
        dist.barrier(ctx)
        dist.shutdown(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
