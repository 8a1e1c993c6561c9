"""Step traces for the peak prediction, made beside the session's first configuration.

Before a rank builds a model it predicts the run's peak memory from a traced step (plan/predict.py),
and the first trace of a process pays for the imports it needs: on a fresh H100 host the first
configuration spent 15.3 s predicting, the second 1.4 s (docs/results/2026-11-25-h100-time-to-answer,
run 3). On a GPU the session therefore starts one process, as soon as collection has finished, that
traces the selected configurations' steps into the trace cache (worker/ahead_tracer.py) while the
first group of ranks starts: a rank finds its trace there, or waits for the one being made. Traces
are kept on disk, so a later session on the machine reads them without tracing.

Not on a CPU: there the process would compete for the cores of the configuration it runs beside,
and each rank's traces reach the same cache as it goes. Standard library only.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .ops_ahead import stop_process_group

if TYPE_CHECKING:
    from pathlib import Path

    from ..config.spec import RunSpec

LOG_NAME = "trace-ahead.log"


@dataclass
class AheadTraces:
    process: subprocess.Popen[bytes]
    log_path: Path
    started: float

    def finish(self) -> None:
        """Stop it where it still runs: the session has ended, nothing left reads its traces."""
        if self.process.poll() is None:
            stop_process_group(self.process)


def wanted(device_type: str) -> bool:
    """On a GPU, where the cache is kept (LLMBENCH_CACHE_DIR=off keeps none)."""
    return device_type == "cuda" and os.environ.get("LLMBENCH_CACHE_DIR", "").strip().lower() != "off"


def start(specs: list[RunSpec], folder: Path, nice: int = 5) -> AheadTraces:
    """The tracer in a process group of its own, SPECS in the order they will run, its output
    to FOLDER/trace-ahead.log (the session's own folder), at a lower priority than the ranks."""
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / LOG_NAME
    command = [sys.executable, "-m", "llmbench_pytest.worker.ahead_tracer", str(nice)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        assert process.stdin is not None
        process.stdin.write(pickle.dumps(list(specs)))
        process.stdin.close()
    except OSError:  # it ended at once (see its log): each rank traces for itself
        pass
    return AheadTraces(process, log_path, time.monotonic())
