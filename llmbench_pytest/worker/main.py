"""Runs inside each rank of a group the launcher started: `python -m llmbench_pytest.worker.main`.

torchrun starts one of these per rank. Each reads the job the launcher wrote (job.json in the
run directory), sends its own stdout and stderr, C++ and NCCL output included, to rank<k>.log
beside the result, beats a progress file, trains, and rank 0 writes measurement.json. A failure
inside the run is part of the measurement (status oom or error); anything that escapes is
recorded by torchrun's error handler, whose summary the launcher reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from ..config.ranks import rank_env
from ..config.spec import RunSpec
from ..results.storage import write_json_atomic
from . import dist
from .progress import ProgressFile, progress_path
from .run import run_benchmark

MEASUREMENT_FILE = "measurement.json"
JOB_FILE = "job.json"


def _own_output(path: Path) -> None:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at its rank log."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


@record
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of an llmbench run (started by the launcher)")
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir
    job = json.loads((run_dir / JOB_FILE).read_text())
    env = rank_env()
    _own_output(run_dir / f"rank{env.rank}.log")

    log = logging.getLogger("llmbench")
    log.setLevel(logging.DEBUG)
    to_file = logging.StreamHandler(sys.stderr)
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(logging.Formatter(f"%(asctime)s rank{env.rank} %(levelname)s %(message)s"))
    log.addHandler(to_file)
    log.addHandler(ProgressFile(progress_path(run_dir, env.rank)))

    spec = RunSpec.from_dict(job["spec"])
    log.info("rank %d of %d on %s: %s", env.rank, env.world_size, os.uname().nodename, spec.name)
    ctx = dist.init(env, spec.device, float(job["timeout_s"]))
    measurement = run_benchmark(spec, ctx, log, job.get("repo_dir"), trace_dir=run_dir)
    if env.rank == 0:
        write_json_atomic(run_dir / MEASUREMENT_FILE, measurement.to_dict())
    log.info("done: %s", measurement.status)
    dist.barrier(ctx)
    dist.shutdown(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
