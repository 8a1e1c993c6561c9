"""The peak-prediction traces the selected configurations need, made beside the ranks' start.

Each configuration's rank traces one training step without a GPU before it builds its model, to
predict its peak (worker/step_trace.py); the traces are kept on disk, so on a host that ran the
session before every rank reads them. On a fresh host the first rank would trace while its GPU
waits (1.8 s for llama-1b's DDP step on 1x H100, 0.8 s more for the first 16-bit strategy). When
collection has finished, the session starts worker/trace_ahead.py with the selected
configurations: it traces those the cache lacks while the rank group starts, imports and
initialises CUDA, and a rank that reaches a trace still being made waits for it instead of making
it again. Its figures go to trace-ahead.json (and its output to trace-ahead.log) in the session's
folder; a session that ends first stops it, and it dies with the session's process.

--llmbench-trace-ahead: auto (the default) on a GPU only (on a 2-core CPU machine it would slow
what the first configuration measures); yes: on any device; no: each rank traces what it needs.
Nothing starts where LLMBENCH_CACHE_DIR=off (no cache to hand the traces over).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config.lifeline import with_parent_death_signal
from .ops_ahead import stop_process_group, wanted

if TYPE_CHECKING:
    from pathlib import Path

    from ..config.spec import RunSpec

JSON_NAME = "trace-ahead.json"
LOG_NAME = "trace-ahead.log"

__all__ = ["AheadTrace", "start", "wanted"]


@dataclass
class AheadTrace:
    process: subprocess.Popen[bytes]
    json_path: Path

    def finish(self) -> None:
        """Stop it if it still runs (the session ended before its ranks needed the traces)."""
        if self.process.poll() is None:
            stop_process_group(self.process)


def start(specs: list[RunSpec], folder: Path) -> AheadTrace | None:
    """worker/trace_ahead.py for `specs` in a process group of its own; None where there is no
    cache to hand traces over."""
    if os.environ.get("LLMBENCH_CACHE_DIR", "").strip().lower() == "off":
        return None
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / JSON_NAME
    command = [sys.executable, "-m", "llmbench_pytest.worker.trace_ahead", str(json_path)]
    with open(folder / LOG_NAME, "wb") as log:
        process = subprocess.Popen(
            with_parent_death_signal(command),
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole
        )
    assert process.stdin is not None
    with process.stdin:
        process.stdin.write(json.dumps([spec.to_dict() for spec in specs]).encode())
    return AheadTrace(process, json_path)
