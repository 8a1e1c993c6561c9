"""The progress contract between the ranks and the progress display (issue 14): progress records on
the "llmbench" logger, the heartbeat file's JSON, and the in-process forwarder."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

from llmbench_pytest.launch.launcher import read_heartbeat
from llmbench_pytest.session.fixture import ForwardProgress
from llmbench_pytest.worker import progress
from llmbench_pytest.worker.progress import ProgressFile, note, start_clock


def test_heartbeat_holds_the_message_the_time_and_the_progress_fields(tmp_path, monkeypatch):
    # the heartbeat's clock, stopped: the once-a-second limit below must not depend on how soon
    # this process gets the CPU back on a loaded machine
    now = [1000.0]
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    path = tmp_path / "rank0.progress"
    log = logging.getLogger("llmbench.test.heartbeat")
    log.setLevel(logging.DEBUG)
    beat = ProgressFile(path)
    log.addHandler(beat)
    try:
        assert read_heartbeat(path)["phase"] == "starting"
        start_clock()
        fields = {"phase": "measuring", "step": 12, "steps": 100, "min_steps": 10, "precision": 0.013}
        note(log, logging.INFO, {**fields, "tokens_per_sec": 5000.0}, "step %d/%d", 12, 100)
        got = read_heartbeat(path)
        assert got["message"] == "step 12/100" and got["time"] > 0 and got["elapsed_s"] >= 0
        assert {k: got[k] for k in fields} == fields and got["tokens_per_sec"] == 5000.0
        now[0] += 0.5
        log.debug("step 13/100")  # per-step records: at most one write a second
        assert read_heartbeat(path)["message"] == "step 12/100"
        now[0] += 0.6
        log.debug("step 14/100")  # a second after the last write: written
        assert read_heartbeat(path)["message"] == "step 14/100"
        log.warning("something the launcher should quote")  # a plain record: message only
        assert read_heartbeat(path)["message"] == "something the launcher should quote"
    finally:
        log.removeHandler(beat)


def test_a_heartbeat_that_is_not_json_reads_as_its_message(tmp_path):
    path = tmp_path / "rank1.progress"
    path.write_text("warmup 2/2 loss 8.2")  # an older worker, or any text
    assert read_heartbeat(path) == {"message": "warmup 2/2 loss 8.2"}
    path.write_text("[1, 2]")
    assert read_heartbeat(path) == {"message": "[1, 2]"}


def test_in_process_records_reach_the_callback_with_their_message():
    seen: list[dict] = []
    log = logging.getLogger("llmbench.test.forward")
    log.setLevel(logging.INFO)
    handler = ForwardProgress(seen.append)
    log.addHandler(handler)
    try:
        note(log, logging.INFO, {"phase": "warmup", "step": 1, "steps": 2}, "warmup %d/%d", 1, 2)
        log.info("a record without progress is not forwarded")
    finally:
        log.removeHandler(handler)
    assert len(seen) == 1
    assert seen[0]["message"] == "warmup 1/2" and seen[0]["phase"] == "warmup" and "elapsed_s" in seen[0]
