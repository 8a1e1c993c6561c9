"""Runs inside each rank: progress records, and the heartbeat file the launcher reads.

A progress record is an ordinary record of the "llmbench" logger that carries
`extra={"progress": {...}}` (the contract with the progress display): "phase" (starting,
building, warmup, measuring, profiling, done), "step", "steps", "min_steps", "precision",
"tokens_per_sec", "elapsed_s". `note()` makes one; in-process and in-rank sessions forward
them from a logging handler, launcher-mode ranks write them into their heartbeat file.

The heartbeat file (rank<k>.progress) holds one JSON object, {"message", "time", **progress},
rewritten by every record: the per-step DEBUG records at most once a second, the few INFO-and-
above records (phases, warm-up, check points, errors) always. The launcher compares the file's
age with its limit to tell slow from hung, and quotes the message when a rank goes quiet.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from ..results.storage import write_text_atomic

if TYPE_CHECKING:
    from pathlib import Path

_MIN_INTERVAL_S = 1.0
PHASES = ("starting", "building", "warmup", "measuring", "profiling", "done")

_started = time.monotonic()


def start_clock() -> None:
    """A configuration starts in this rank: elapsed_s counts from here."""
    global _started
    _started = time.monotonic()


def note(log: logging.Logger, level: int, fields: dict[str, Any], msg: str, *args: object) -> None:
    """Log `msg` with a progress dict (elapsed_s added); `fields` holds the contract's keys."""
    assert fields.get("phase", "starting") in PHASES, fields
    progress = {**fields, "elapsed_s": round(time.monotonic() - _started, 3)}
    log.log(level, msg, *args, extra={"progress": progress})


def progress_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank{rank}.progress"


def heartbeat(record: logging.LogRecord) -> dict[str, Any]:
    """What a heartbeat holds for one record: its message, the time, and its progress fields."""
    return {"message": record.getMessage()[:500], "time": time.time(), **getattr(record, "progress", {})}


class ProgressFile(logging.Handler):
    def __init__(self, path: Path) -> None:
        super().__init__(level=logging.DEBUG)
        self.path = path
        self._last = 0.0
        self._write({"message": "started", "time": time.time(), "phase": "starting"})

    def _write(self, beat: dict[str, Any]) -> None:
        # the launcher never reads half a message; a heartbeat need not survive a power cut
        write_text_atomic(self.path, json.dumps(beat, default=str), durable=False)
        self._last = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        # per-step DEBUG records come many times a second: write those at most once a second
        if record.levelno < logging.INFO and time.monotonic() - self._last < _MIN_INTERVAL_S:
            return
        try:
            self._write(heartbeat(record))
        except OSError:
            pass  # a full disk must not end the run; the launcher will see the rank as quiet
