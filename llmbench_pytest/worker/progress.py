"""Runs inside each rank: a heartbeat file that the launcher reads to tell slow from hung, and
to show where the run is.

Every log record of the run rewrites this rank's progress file with a JSON object: the record's
message, the time, and the record's `progress` dict when it carries one (phase, step, steps,
precision, tokens_per_sec, ...: issue 14's progress contract). The loop's per-step DEBUG records
do so at most once a second. The launcher compares the file's age with its limit; the message
says where the rank was when it went quiet; the rest feeds the progress display in pytest.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from ..results.storage import write_text_atomic

if TYPE_CHECKING:
    from pathlib import Path

_MIN_INTERVAL_S = 1.0
_MAX_MESSAGE = 500


def progress_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank{rank}.progress"


class ProgressFile(logging.Handler):
    def __init__(self, path: Path) -> None:
        super().__init__(level=logging.DEBUG)
        self.path = path
        self._last = 0.0
        self._write("started", None)

    def _write(self, message: str, progress: object) -> None:
        beat = {"message": message[:_MAX_MESSAGE], "time": time.time()}
        if isinstance(progress, dict):
            beat.update(progress)
        # the launcher never reads half a message; a heartbeat need not survive a power cut
        write_text_atomic(self.path, json.dumps(beat, default=str), durable=False)
        self._last = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        # per-step DEBUG records come many times a second: write those at most once a second;
        # the few INFO-and-above records (phases, warm-up, errors) always
        if record.levelno < logging.INFO and time.monotonic() - self._last < _MIN_INTERVAL_S:
            return
        try:
            self._write(record.getMessage(), getattr(record, "progress", None))
        except OSError:
            pass  # a full disk must not end the run; the launcher will see the rank as quiet
