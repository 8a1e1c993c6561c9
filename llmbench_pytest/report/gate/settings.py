"""The saved run `--llmbench-gate=REF` names, found and checked at session start.

The gate's bounds are parsed with the options (config/gate_bounds.py); the baseline needs the
report's readers, so it is checked here, by the plugin, before anything trains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..saved_runs import resolve_saved_run
from ..sources import load_records

if TYPE_CHECKING:
    from pathlib import Path


def check_gate_baseline(ref: str, storage: Path | str) -> Path:
    """The saved run `--llmbench-gate=REF` names, found and readable as llmbench records, or
    ReportError with the one-line reason (no storage, no match, several matches, not llmbench's)."""
    path = resolve_saved_run(str(ref), storage)
    load_records(path)
    return path
