"""`python -m llmbench_pytest.worker.ahead_tracer [NICE]`: traces the steps of the RunSpecs pickled on its
standard input, in their order, into the trace cache (trace_cache.py), for session/trace_ahead.py.

Each key is marked as being traced while it is, so that a rank that reaches it first waits for it
instead of tracing it too; a key already in the cache, or one this process traced for an earlier
spec, is skipped. A spec the trace cannot follow is passed over (its rank records why)."""

from __future__ import annotations

import os
import pickle
import sys
import time


def main() -> int:
    os.nice(int(sys.argv[1]) if len(sys.argv) > 1 else 0)  # beside a measured configuration: ranks first
    specs = pickle.load(sys.stdin.buffer)
    started = time.perf_counter()
    from ..config.presets import resolve_model
    from . import trace_cache
    from .step_trace import trace_key, trace_step

    done: set[tuple[object, ...]] = set()
    for spec in specs:
        if spec.compile:
            continue  # not predicted (plan/predict.py)
        preset = resolve_model(spec.model, spec.model_config)
        key = trace_key(spec, preset)
        if key in done or trace_cache.load(key) is not None:
            continue
        done.add(key)
        marker = trace_cache.mark_pending(key)
        try:
            trace = trace_step(spec, preset)
            print(f"{spec.name}: traced in {trace.seconds:.1f} s", flush=True)
        except Exception as exc:  # the rank meets it again and records it with its run
            print(f"{spec.name}: not traced: {type(exc).__name__}: {exc}", flush=True)
        finally:
            if marker is not None:
                marker.unlink(missing_ok=True)
    print(f"{len(done)} step trace(s) made in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
