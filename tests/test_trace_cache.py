"""A fresh process predicts its peak from the step trace an earlier process made (on disk, keyed
by everything the trace depends on) instead of tracing again; anything else traces again. A rank
that reaches a trace the session's trace ahead is making waits for it (worker/trace_ahead.py)."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llmbench_pytest.config.presets import resolve_model
from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.plan.predict import predict_spec, traced_as
from llmbench_pytest.results.liveness import session_alive, this_session
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


def _marker(spec: RunSpec):
    key = trace_cache.trace_key(spec, traced_as(spec, resolve_model(spec.model, spec.model_config)))
    return trace_cache._path(key).with_suffix(trace_cache.PENDING)


def test_a_rank_waits_for_the_trace_being_made_ahead_instead_of_making_it_again(cache, monkeypatch, tmp_path):
    out = tmp_path / "trace-ahead.json"
    ahead = subprocess.Popen(
        [sys.executable, "-m", "llmbench_pytest.worker.trace_ahead", str(out)], stdin=subprocess.PIPE
    )
    assert ahead.stdin is not None
    ahead.stdin.write(json.dumps([SPEC.to_dict(), SPEC.to_dict()]).encode())
    ahead.stdin.close()
    marker = _marker(SPEC)
    deadline = time.monotonic() + 60
    while not marker.exists() and ahead.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    # marked before it imports torch: on this machine well before its trace is stored
    assert marker.exists() and not list(cache.glob("*.json")), "the trace ahead marked nothing in time"
    _no_tracing(monkeypatch)  # this process (the rank) must not trace
    assert predict_spec(SPEC).trace_cached
    assert ahead.wait(timeout=60) == 0 and not marker.exists()
    made = json.loads(out.read_text())
    assert [t["configuration"] for t in made["traced"]] == [SPEC.name]  # the same step once
    assert "error" not in made["traced"][0]


@pytest.mark.parametrize("reaped", [True, False], ids=["exited", "zombie"])
def test_a_trace_marked_by_a_process_that_died_is_made_by_the_rank(cache, monkeypatch, reaped):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    if reaped:
        gone.wait()
    else:  # exited, not yet reaped by its parent (a session that has not waited for it yet)
        while not Path(f"/proc/{gone.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            time.sleep(0.01)
    marker = _marker(SPEC)
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({**this_session(), "pid": gone.pid}))
    started = time.monotonic()
    assert not predict_spec(SPEC).trace_cached
    assert time.monotonic() - started < trace_cache.AHEAD_WAIT_S / 2  # it did not wait out the limit
    gone.wait()


def test_a_rank_stops_waiting_at_the_limit(cache):
    marker = _marker(SPEC)
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps(this_session()))  # alive, and never stores it
    key = trace_cache.trace_key(SPEC, traced_as(SPEC, resolve_model(SPEC.model, SPEC.model_config)))
    started = time.monotonic()
    assert trace_cache.wait_for_ahead(key, limit_s=0.3) is None
    assert 0.3 <= time.monotonic() - started < 5


def test_a_marker_is_never_seen_half_written(cache, monkeypatch):
    """A rank polling for the marker reads it whole or not at all: one it could not parse would be
    taken for none, and the rank would trace the step a second time (CI, seed 73385)."""
    real_open = io.open

    class SlowHalves:  # writes half, lets the reader in, then the rest
        def __init__(self, fh):
            self._fh = fh

        def write(self, text):
            self._fh.write(text[: len(text) // 2])
            self._fh.flush()
            time.sleep(0.3)
            return self._fh.write(text[len(text) // 2 :])

        def __getattr__(self, name):
            return getattr(self._fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._fh.__exit__(*exc)

    def slow_open(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        return SlowHalves(fh) if "w" in mode else fh

    monkeypatch.setattr(io, "open", slow_open)
    key = trace_cache.trace_key(SPEC, traced_as(SPEC, resolve_model(SPEC.model, SPEC.model_config)))
    marking = threading.Thread(target=trace_cache.mark_pending, args=(key,))
    marking.start()
    marker, seen = _marker(SPEC), []
    deadline = time.monotonic() + 30
    while (marking.is_alive() or not seen) and time.monotonic() < deadline:
        try:
            seen.append(marker.read_text())
        except FileNotFoundError:
            time.sleep(0.005)
    marking.join()
    assert seen, "mark_pending wrote no marker"
    for text in seen:
        try:
            owner = json.loads(text)
        except ValueError:
            pytest.fail(f"read a half-written marker: {text!r}")
        assert session_alive(owner) is True
