"""Step traces kept on disk, so that a fresh process predicts its peak without tracing again.

A trace (worker/step_trace.py) depends on the model, the shapes, the precision, the techniques, the
installed torch and transformers, and llmbench's own code; it takes seconds (the trace itself, and
importing torch's FakeTensorMode, which brings torch._dynamo) in every rank of every fresh group,
before the first model is built. Its result is a dozen numbers. They are stored as JSON under
LLMBENCH_CACHE_DIR (default: $XDG_CACHE_HOME/llmbench, else ~/.cache/llmbench), in `step-traces/`,
named by a hash of all of the above, so that any change to any of them traces again.
LLMBENCH_CACHE_DIR=off keeps nothing. A file that cannot be read or written is a miss, never an error.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

from ..analysis.peak_model import StepTrace

_PACKAGE = Path(__file__).resolve().parents[1]


def cache_dir() -> Path | None:
    """Where traces live, or None when LLMBENCH_CACHE_DIR=off."""
    given = os.environ.get("LLMBENCH_CACHE_DIR", "").strip()
    if given.lower() == "off":
        return None
    if given:
        return Path(given).expanduser() / "step-traces"
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "llmbench" / "step-traces"


@functools.cache
def _code_version() -> str:
    """A hash of llmbench's source and the versions of the libraries that build and run the model:
    an edited builder or an upgraded transformers must not read an older trace."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(path.relative_to(_PACKAGE).as_posix().encode())
        h.update(path.read_bytes())
    for dist in ("torch", "transformers", "peft"):
        try:
            h.update(f"{dist}={importlib.metadata.version(dist)}".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return h.hexdigest()


def _path(key: tuple[Any, ...]) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.sha256(json.dumps([_code_version(), key], default=str).encode()).hexdigest()
    return root / f"{digest[:32]}.json"


def load(key: tuple[Any, ...]) -> StepTrace | None:
    path = _path(key)
    if path is None:
        return None
    try:
        return StepTrace(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def store(key: tuple[Any, ...], trace: StepTrace) -> None:
    path = _path(key)
    if path is None:
        return
    from ..results.storage import write_text_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(dataclasses.asdict(trace)), durable=False)
    except OSError:
        pass  # a read-only home: the next process traces again
