"""A run whose session was killed (SIGKILL, the OOM killer, a scheduler's time limit) leaves its
result.json at status "running". The report calls it unfinished, with when it was last heard of,
never a configuration that did not fit; a run in progress in a live session stays "running"
(results/liveness.py, report/collect.judged).

The placeholders are written by the real writer (results.build.placeholder, with the owner the
fixture records), and one session is really killed mid-run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from conftest import CHILD_UNSET, REPO, TORCH_EXTENSIONS_DIR
from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.results import liveness
from llmbench_pytest.results.build import build_result, placeholder
from llmbench_pytest.results.measurement import Measurement


def spec(strategy: str = "zero2", offload: str = "none") -> RunSpec:
    return RunSpec(
        strategy=strategy, offload=offload, model="llama-tiny", seq_len=128, per_device_batch=2,
        steps=12, warmup=1, dtype="fp32", world_size=1, device="cpu",
    )  # fmt: skip


def finished(strategy: str, step: float) -> dict[str, Any]:
    m = Measurement(
        status="ok",
        step_times=[step] * 4,
        losses=[8.0, 7.5, 7.0, 6.5],
        window_s=4 * step,
        timing_method="perf_counter",
        per_rank=[{"rank": 0, "status": "ok", "peak_rss_bytes": 2e9}],
        model={"name": "llama-tiny", "params": 5_261_568, "flops_per_token": 26_850_816.0},
        env={"device": "cpu"},
    )
    return build_result(spec(strategy), m, {"nodes": 1, "ranks_per_node": 1})


def running(owner: dict[str, Any] | None, strategy: str = "zero2", offload: str = "cpu") -> dict[str, Any]:
    """The placeholder a run starts with, as session/fixture.py writes it."""
    meta = {
        "started_at": "2026-11-24T10:00:00",
        "mode": "launcher",
        "config": {"session": {"timeout": 600.0}},
    }
    doc = placeholder(spec(strategy, offload), "running", meta)
    if owner is not None:
        doc["metadata"]["session"] = owner
    return doc


def write(root: Path, name: str, doc: dict[str, Any]) -> Path:
    path = root / f"bench-h-{name}_results" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc, indent=2))
    return path


def report(root: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", "report", str(root), "--no-plots"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return (root / "summary" / "BENCHMARK_REPORT.md").read_text()


def lines_matching(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if fnmatch(line, pattern)]


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def owner(pid: int) -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": pid, "pid_start": None, "boot_id": None}


def test_a_run_its_killed_session_left_running_is_unfinished_not_did_not_fit(tmp_path: Path):
    root = tmp_path / "results"
    path = write(root, "zero2_offload-ws1-seq128", running(owner(dead_pid())))
    started = time.time() - 90
    os.utime(path, (started, started))  # written when the run started; the beats came later
    beat = {"message": "step 5", "time": time.time() - 30, "phase": "measuring", "step": 5, "steps": 12}
    (path.parent / "rank0.progress").write_text(json.dumps(beat))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(beat["time"]))
    md = report(root)
    note = f"unfinished (last heard of at {when}: phase measuring, step 5 of 12)"
    assert lines_matching(md, f"- Did not finish: zero2_offload ({note}).")
    assert lines_matching(md, "- No configuration finished, so none can be recommended.")
    assert not lines_matching(md, "*within the memory limit*") and not lines_matching(md, "*Did not fit*")
    assert lines_matching(
        md, f"- `bench-h-zero2_offload-ws1-seq128`: **{note}**; its session (pid * on *) is gone"
    )
    (glance,) = lines_matching(md, "| * | none finished *")
    assert glance.replace(" ", "").endswith("||")  # at a glance: nothing counted as not fitting


def test_a_run_in_progress_in_a_live_session_is_still_running(tmp_path: Path):
    root = tmp_path / "results"
    write(root, "zero2-ws1-seq128", finished("zero2", 0.5))
    write(root, "zero3-ws1-seq128", running(liveness.this_session(), strategy="zero3", offload="none"))
    md = report(root)  # this test's process is the live session that owns the run
    assert lines_matching(md, "- **zero2** is the fastest that fits: *")
    assert lines_matching(
        md, "- Did not finish: zero3 (still running (last heard of at *: its result.json's last write))."
    )
    assert lines_matching(
        md, "- `bench-h-zero3-ws1-seq128`: **still running (*)**; its session (pid * on *) is alive"
    )
    assert not lines_matching(md, "*unfinished (*") and not lines_matching(md, "*Did not fit*")


def test_without_a_recorded_owner_the_heartbeat_decides(tmp_path: Path):
    """Results from another host, or written before the owner was recorded: a run quiet for longer
    than a live one can be (the launcher's quiet limit for its timeout, and a minute) is unfinished."""
    root = tmp_path / "results"
    old = write(root, "zero2-ws1-seq128", running(None, offload="none"))
    hours_ago = time.time() - 3 * 3600
    os.utime(old, (hours_ago, hours_ago))
    written = time.monotonic()
    write(
        root, "zero3-ws1-seq128", running({"host": "elsewhere", "pid": 1}, strategy="zero3", offload="none")
    )
    md = report(root)
    took = time.monotonic() - written
    assert lines_matching(
        md,
        "- `bench-h-zero2-ws1-seq128`: **unfinished (last heard of at *: its result.json's last write)**; "
        "no sign of life for 3.0 h, longer than a live run is quiet (14 min)",
    )
    (line,) = lines_matching(
        md,
        "- `bench-h-zero3-ws1-seq128`: **still running (*)**; the session that runs it is on elsewhere, not "
        "this host; quiet for * s, which a live run may be (14 min)",
    )
    # written just now: as long as the report took to start and read it, on a loaded machine too
    quiet = float(re.search(r"quiet for ([\d.]+) s", line).group(1))
    assert 0 <= quiet <= took + 1, (line, took)


def test_a_dead_owner_is_told_from_a_zombie_and_a_reused_pid():
    me = liveness.this_session()
    assert liveness.session_alive(me) is True
    assert liveness.session_alive({**me, "pid": dead_pid()}) is False
    # the pid is alive, but it is another process than the one that started the run
    assert liveness.session_alive({**me, "pid_start": (me["pid_start"] or 0) + 1}) is (
        me["pid_start"] is None
    )
    assert liveness.session_alive({**me, "host": "elsewhere"}) is None
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert liveness.session_alive({**me, "pid": zombie.pid, "pid_start": None}) is False
    finally:
        zombie.wait()


def _our_processes(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_session_killed_mid_run_leaves_a_run_the_report_calls_unfinished(tmp_path: Path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "test_pretrain.py").write_bytes(
        (REPO / "benchmarks" / "test_pretrain.py").read_bytes()
    )
    mark = f"llmbench-stale-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
    env |= {"TORCH_EXTENSIONS_DIR": TORCH_EXTENSIONS_DIR, "LLMBENCH_TEST_MARK": mark}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "benchmarks",
        "--llmbench-strategies=ddp",
    ]
    cmd += ["--llmbench-world-sizes=1", "--llmbench-warmup=1", "--llmbench-steps=100000"]
    session = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        beat_file = tmp_path / "results" / "bench-placeholder"
        deadline = time.monotonic() + 240
        beat: dict[str, Any] = {}
        while beat.get("phase") != "measuring":
            assert session.poll() is None, "the session ended before it was killed"
            assert time.monotonic() < deadline, "no rank reached the measured window"
            time.sleep(0.2)
            found = list((tmp_path / "results").glob("latest/*_results/rank0.progress"))
            if found:
                beat_file = found[0]
                try:
                    beat = json.loads(beat_file.read_text())
                except (OSError, ValueError):
                    beat = {}
        result = json.loads((beat_file.parent / "result.json").read_text())
        assert result["status"] == "running" and result["metadata"]["session"]["pid"] == session.pid
    finally:
        session.send_signal(signal.SIGKILL)  # no handler runs: the placeholder stays
        session.wait()
    deadline = time.monotonic() + 30
    while _our_processes(mark) and time.monotonic() < deadline:  # the ranks die with it (lifeline.py)
        time.sleep(0.2)
    left = _our_processes(mark)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes outlived the killed session: {left}"
    assert json.loads((beat_file.parent / "result.json").read_text())["status"] == "running"
    md = report(tmp_path / "results")
    assert lines_matching(
        md,
        "- `bench-*-ddp-ws1-seq128`: **unfinished (last heard of at *: phase measuring, step *)**; "
        f"its session (pid {session.pid} on *) is gone",
    ), md
    assert not lines_matching(md, "*within the memory limit*") and not lines_matching(md, "*Did not fit*")
    assert lines_matching(
        md, "- Did not finish: ddp (unfinished (last heard of at *: phase measuring, step *))."
    )
