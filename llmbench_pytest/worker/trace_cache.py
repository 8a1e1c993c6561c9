"""Step traces kept on disk, so that a fresh process predicts its peak without tracing again.

A trace (worker/step_trace.py) depends on the model, the shapes, the precision, the techniques, the
installed torch and transformers, and llmbench's own code; it takes seconds (the trace itself, and
importing torch's FakeTensorMode, which brings torch._dynamo) in every rank of every fresh group,
before the first model is built. Its result is a dozen numbers. They are stored as JSON under
LLMBENCH_CACHE_DIR (default: $XDG_CACHE_HOME/llmbench, else ~/.cache/llmbench), in `step-traces/`,
named by a hash of all of the above, so that any change to any of them traces again.
LLMBENCH_CACHE_DIR=off keeps nothing. A file that cannot be read or written is a miss, never an error.

A process tracing ahead of the ranks (worker/trace_ahead.py) marks each trace it will make with a
`.pending` file naming it (results/liveness.py); a rank that misses a trace so marked waits for it (while that
process lives, up to AHEAD_WAIT_S) instead of tracing it a second time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.peak_model import StepTrace
from ..results.liveness import session_alive, this_session

if TYPE_CHECKING:
    from ..config.presets import ModelPreset
    from ..config.spec import RunSpec

_PACKAGE = Path(__file__).resolve().parents[1]
AHEAD_WAIT_S = 60.0
"""The longest a rank waits for a trace another process is making: a 1B model traces in about 2 s
on a GPU host, a 7B LoRA step in under 30 s; past this the rank traces it itself."""
PENDING = ".pending"


def compute_mode(strategy: str, dtype: str) -> str:
    """How the strategy computes on a GPU (step_trace.py's docstring): "amp", "half" or "fp32"."""
    if dtype not in ("bf16", "fp16"):
        return "fp32"
    return "amp" if strategy == "ddp" else "half"


def trace_key(spec: RunSpec, preset: ModelPreset) -> tuple[Any, ...]:
    """What decides a trace: the model, the shapes, the precision, the techniques (no torch needed:
    a process tracing ahead marks its traces pending before it imports torch)."""
    # the device too: a trace for a GPU rank computes attention and autocast as the GPU does
    # (trace_as_gpu.py)
    shape = (
        spec.workload,
        spec.seq_len,
        spec.per_device_batch,
        spec.dtype,
        spec.grad_ckpt,
        spec.lora_rank,
        spec.device,
    )
    techniques = (spec.fused_loss, spec.fp8, spec.attention)
    mode = compute_mode(spec.strategy, spec.dtype)
    return (preset.name, json.dumps(preset.config, sort_keys=True), shape, techniques, mode)


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


def load_json(key: tuple[Any, ...]) -> Any:
    """What was stored under `key` (any JSON), or None: no cache, never stored, or unreadable."""
    path = _path(key)
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def store_json(key: tuple[Any, ...], doc: Any) -> None:
    path = _path(key)
    if path is None:
        return
    from ..results.storage import write_text_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(doc), durable=False)
    except OSError:
        pass  # a read-only home: the next process traces again


def load(key: tuple[Any, ...]) -> StepTrace | None:
    doc = load_json(key)
    try:
        return StepTrace(**doc) if isinstance(doc, dict) else None
    except TypeError:
        return None


def store(key: tuple[Any, ...], trace: StepTrace) -> None:
    store_json(key, dataclasses.asdict(trace))


def mark_pending(key: tuple[Any, ...]) -> Path | None:
    """Say that this process is tracing `key`: the marker written (this process, as
    results/liveness.py tells it from a later one with its pid), or None (no cache, or it could
    not be written: a rank then traces it itself)."""
    path = _path(key)
    if path is None:
        return None
    from ..results.storage import write_text_atomic

    marker = path.with_suffix(PENDING)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # whole or absent: a rank reading a half-written marker would take it for none and trace
        # the step a second time (seen in CI on a loaded 2-core machine)
        write_text_atomic(marker, json.dumps(this_session()), durable=False)
    except OSError:
        return None
    return marker


def wait_for_ahead(key: tuple[Any, ...], limit_s: float = AHEAD_WAIT_S) -> StepTrace | None:
    """The trace of `key` once the process that marked it pending has stored it; None at once
    where nothing marked it, and None where that process died (a zombie included) or gave it up,
    or past `limit_s`."""
    path = _path(key)
    if path is None:
        return None
    marker = path.with_suffix(PENDING)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            owner = json.loads(marker.read_text())
        except (OSError, ValueError):
            break  # no marker (never, or no longer): the trace is stored or will not be
        if session_alive(owner) is not True:
            break
        time.sleep(0.05)
    return load(key)
