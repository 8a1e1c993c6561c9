"""The session's peak-prediction traces, made in a process of their own while the ranks start.

A fresh rank predicts its configuration's peak before it builds the model (worker/run.py), from a
step traced without a GPU (step_trace.py): on a fresh 1x H100 host 1.8 s for llama-1b's DDP step
and 0.8 s for the 16-bit step the other strategies share, in the first configurations' time while
the GPU waits (docs/results/2026-11-26-h100-pretrain-fresh-host-2). The traces are kept on disk
(trace_cache.py), so only the first session on a host pays them. The plugin starts this module at
the end of collection (session/trace_ahead.py) with the selected configurations: it marks each
trace missing from the cache as pending, traces them in the session's order and stores each; a
rank that reaches a pending trace waits for it (trace_cache.wait_for_ahead). This process starts
while the rank group is still starting, importing and initialising CUDA, which takes longer than
it takes to import and trace; it never touches a GPU.

    python -m llmbench_pytest.worker.trace_ahead OUT.json < SPECS.json   # RunSpec dicts, a JSON list
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..config.presets import ModelPreset, resolve_model
from ..config.spec import RunSpec
from . import trace_cache
from .lean_imports import skip_unused_imports


def _keys(specs: list[RunSpec]) -> dict[tuple[Any, ...], tuple[RunSpec, ModelPreset]]:
    """The traces the configurations need that the cache lacks, one configuration (and its model)
    for each, in order."""
    from ..plan.predict import traced_as  # no torch yet: the markers go down at once

    missing: dict[tuple[Any, ...], tuple[RunSpec, ModelPreset]] = {}
    for spec in specs:
        if spec.compile:
            continue  # not predicted (plan/predict.py)
        preset = resolve_model(spec.model, spec.model_config)
        key = trace_cache.trace_key(spec, traced_as(spec, preset))
        if key not in missing and trace_cache.load(key) is None:
            missing[key] = (spec, preset)
    return missing


def trace_all(specs: list[RunSpec]) -> dict[str, Any]:
    """Trace what the cache lacks; each trace's outcome, for OUT.json."""
    from ..plan.predict import step_trace_for

    started = time.perf_counter()
    if trace_cache.cache_dir() is None:
        return {"traced": [], "configurations": len(specs), "sec": 0.0, "note": "LLMBENCH_CACHE_DIR=off"}
    missing = _keys(specs)
    # every marker before the first trace: a rank waits for any of them, not only the first
    markers = {key: trace_cache.mark_pending(key) for key in missing}
    skip_unused_imports()  # as a rank does, before the first model class (lean_imports.py)
    traced = []
    try:
        for key, (spec, preset) in missing.items():
            began = time.perf_counter()
            row: dict[str, Any] = {"configuration": spec.name, "model": key[0]}
            try:
                step_trace_for(spec, preset, wait_for_ahead=False)
            except Exception as exc:  # the rank traces it itself, and records the same error
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            finally:
                if (marker := markers.pop(key)) is not None:
                    marker.unlink(missing_ok=True)
            row["sec"] = round(time.perf_counter() - began, 3)
            traced.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for marker in markers.values():
            if marker is not None:
                marker.unlink(missing_ok=True)
    return {"traced": traced, "configurations": len(specs), "sec": round(time.perf_counter() - started, 3)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    # stopped by the session (SIGTERM): the markers go with it (a rank would also see it gone)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    specs = [RunSpec.from_dict(d) for d in json.loads(sys.stdin.read())]
    out = trace_all(specs)
    Path(args[0]).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
