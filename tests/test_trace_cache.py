"""A fresh process predicts its peak from the step trace an earlier process made (on disk, keyed
by everything the trace depends on) instead of tracing again; anything else traces again."""

from __future__ import annotations

import dataclasses
import time

import pytest

from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.plan.predict import predict_spec
from llmbench_pytest.worker import step_trace, trace_cache

SPEC = RunSpec(strategy="zero2", model="llama-tiny", seq_len=64, per_device_batch=2, steps=1, warmup=0,
               dtype="bf16", device="cuda")  # fmt: skip


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory, and no trace this process already holds in memory."""
    monkeypatch.setenv("LLMBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_trace, "_TRACED", {})
    return tmp_path / "step-traces"


def _no_tracing(monkeypatch):
    def refuse(*args):
        raise AssertionError("traced again instead of reading the cache")

    monkeypatch.setattr(step_trace, "_trace", refuse)


def test_a_fresh_process_reads_the_trace_instead_of_tracing(cache, monkeypatch):
    first = predict_spec(SPEC)
    assert not first.trace_cached and len(list(cache.glob("*.json"))) == 1
    monkeypatch.setattr(step_trace, "_TRACED", {})  # as a new process starts
    _no_tracing(monkeypatch)
    again = predict_spec(SPEC)
    assert again.trace_cached
    assert dataclasses.replace(again, trace_cached=False) == first


def test_another_shape_or_other_code_traces_again(cache, monkeypatch):
    predict_spec(SPEC)
    predict_spec(RunSpec(**{**dataclasses.asdict(SPEC), "per_device_batch": 4}))
    assert len(list(cache.glob("*.json"))) == 2
    monkeypatch.setattr(step_trace, "_TRACED", {})
    monkeypatch.setattr(trace_cache, "_code_version", lambda: "an edited step_trace.py")
    assert not predict_spec(SPEC).trace_cached
    assert len(list(cache.glob("*.json"))) == 3


def test_an_unreadable_entry_is_traced_again_and_replaced(cache, monkeypatch):
    predict_spec(SPEC)
    (entry,) = cache.glob("*.json")
    entry.write_text("{not json")
    monkeypatch.setattr(step_trace, "_TRACED", {})
    assert not predict_spec(SPEC).trace_cached
    monkeypatch.setattr(step_trace, "_TRACED", {})
    assert predict_spec(SPEC).trace_cached


def test_off_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(step_trace, "_TRACED", {})
    assert trace_cache.cache_dir() is None
    assert not predict_spec(SPEC).trace_cached
    assert not any(tmp_path.iterdir())


# --- traces made ahead, beside the first configuration (session/trace_ahead.py) -----------------


def test_traces_made_ahead_are_read_by_the_rank_that_needs_them(cache, tmp_path, monkeypatch):
    from llmbench_pytest.session import trace_ahead

    other = RunSpec(**{**dataclasses.asdict(SPEC), "strategy": "ddp"})  # amp: another trace
    # at the ranks' priority: the tests beside it would starve a lower one on two cores
    ahead = trace_ahead.start([SPEC, SPEC, other], tmp_path / "session", nice=0)
    assert ahead.process.wait(timeout=300) == 0, ahead.log_path.read_text()
    log = ahead.log_path.read_text()
    assert "2 step trace(s) made" in log and log.count("traced in") == 2, log
    assert len(list(cache.glob("*.json"))) == 2 and not list(cache.glob("*.pending"))
    _no_tracing(monkeypatch)
    assert predict_spec(SPEC).trace_cached and predict_spec(other).trace_cached


def test_a_rank_waits_for_a_trace_being_made_and_not_for_a_dead_tracer(cache, monkeypatch):
    import os
    import subprocess
    import sys
    import threading

    from llmbench_pytest.config.presets import resolve_model

    preset = resolve_model(SPEC.model, SPEC.model_config)
    key = step_trace.trace_key(SPEC, preset)
    made = step_trace._trace(SPEC, preset, step_trace.compute_mode(SPEC.strategy, SPEC.dtype))
    marker = trace_cache.mark_pending(key)
    assert marker is not None and marker.read_text() == str(os.getpid())
    later = threading.Timer(0.5, trace_cache.store, (key, made))
    later.start()
    try:
        assert trace_cache.wait(key, limit_s=30) == made  # stored while it waited
    finally:
        later.cancel()
    # a tracer that died without storing: no wait at all
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    key2 = step_trace.trace_key(RunSpec(**{**dataclasses.asdict(SPEC), "seq_len": 32}), preset)
    trace_cache.mark_pending(key2).write_text(dead.stdout.strip())
    started = time.monotonic()
    assert trace_cache.wait(key2, limit_s=30) is None
    assert trace_cache.wait(("never", "marked"), limit_s=30) is None
    assert time.monotonic() - started < 5
