"""DeepSpeed ops built beside the first configurations (session/ops_ahead.py): which ops a
selection needs, the line the session ends with, and a build still running at the end is
stopped with its whole process group. The build itself runs for real in the default matrix
(tests/test_train_cpu.py, --llmbench-ops-ahead=yes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from llmbench_pytest.config.spec import RunSpec, parse_strategy
from llmbench_pytest.session import ops_ahead


def spec(name: str) -> RunSpec:
    info, offload = parse_strategy(name)
    shape = {"model": "llama-tiny", "seq_len": 64, "per_device_batch": 1, "steps": 2, "warmup": 0}
    nvme = {"nvme_path": "/tmp"} if offload == "nvme" else {}
    return RunSpec(strategy=info.name, offload=offload, dtype="fp32", **shape, **nvme)


def test_the_ops_a_selection_needs():
    assert ops_ahead.needed([spec("ddp"), spec("fsdp")], "cuda") == []
    assert ops_ahead.needed([spec("ddp"), spec("zero2")], "cuda") == []
    assert ops_ahead.needed([spec("zero2")], "cpu") == ["shm_comm"]  # DeepSpeed's CPU all-reduce
    assert ops_ahead.needed([spec("zero2_offload"), spec("ddp")], "cuda") == ["cpu_adam"]
    assert ops_ahead.needed([spec("zero3_nvme")], "cuda") == ["cpu_adam", "async_io"]
    assert ops_ahead.wanted("auto", "cuda") and not ops_ahead.wanted("auto", "cpu")
    assert ops_ahead.wanted("yes", "cpu") and not ops_ahead.wanted("no", "cuda")


def test_the_line_says_what_was_compiled_and_what_was_found(tmp_path):
    path = tmp_path / ops_ahead.JSON_NAME
    path.write_text(
        json.dumps({"cpu_adam": {"sec": 49.8, "compiled": True}, "async_io": {"error": "no libaio"}})
    )
    line = ops_ahead.summary(["cpu_adam", "async_io"], path, 0)
    assert "cpu_adam compiled in 49.8 s" in line and "async_io not built (no libaio)" in line
    path.write_text(json.dumps({"cpu_adam": {"sec": 0.4, "compiled": False}}))
    assert "cpu_adam already built (0.4 s to load)" in ops_ahead.summary(["cpu_adam"], path, 0)
    path.unlink()
    assert "exit code 1 and wrote no figures" in ops_ahead.summary(["cpu_adam"], path, 1)


def test_a_build_still_running_at_the_end_is_stopped_with_its_children(tmp_path):
    # a stand-in build: a process group whose child (the compiler, on a real host) outlives a
    # plain kill of its parent
    child = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('started', flush=True); time.sleep(60)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", child], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    # the compiler stand-in exists before the session ends, however busy the machine
    assert process.stdout is not None and process.stdout.readline() == "started\n"
    build = ops_ahead.AheadBuild(["cpu_adam"], process, tmp_path / ops_ahead.JSON_NAME, time.monotonic())
    (line,) = build.finish(interrupted=False)
    assert "still running" in line and "was stopped" in line
    assert process.poll() is not None
    process.stdout.close()
    assert not _group_alive(process.pid), "the build's process group outlived the session"


def _group_alive(pgid: int, within_s: float = 5.0) -> bool:
    """Whether a live (not zombie) process of the group remains after `within_s`: a killed child
    stays a zombie until whoever adopted it reaps it."""
    deadline = time.monotonic() + within_s
    while True:
        states = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                states.append(fields[0])
        if all(state == "Z" for state in states) or time.monotonic() > deadline:
            return any(state != "Z" for state in states)
        time.sleep(0.1)
