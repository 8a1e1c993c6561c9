"""A fresh process predicts its peak from the step trace an earlier process made (on disk, keyed
by everything the trace depends on) instead of tracing again; anything else traces again."""

from __future__ import annotations

import dataclasses

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
