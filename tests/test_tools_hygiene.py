"""The tools in tools/ behave: ending a tool ends the pytest session it runs (pytest, torchrun and
every rank), and no tool writes into the working tree unless it is given a path there."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import REPO, TORCH_EXTENSIONS_DIR

SESSION = ["--llmbench-strategies=ddp", "--llmbench-world-sizes=2", "-p", "no:cacheprovider", "-q"]


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _rank_pids(run_dir: Path) -> set[int]:
    """The ranks' process ids, from the first line each writes to its log (a forked rank keeps
    its agent's command line, so that does not tell them apart)."""
    pids = set()
    for log in run_dir.glob("rank*.log"):
        found = re.search(r"rank \d+ of \d+ on .*?\(pid (\d+)", log.read_text(errors="replace"))
        if found:
            pids.add(int(found.group(1)))
    return pids


def _ppid(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def _terminal_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _handlers(pid: int) -> str:
    """Which signals a process ignores and catches (SigIgn, SigCgt of /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "unknown"
    return " ".join(
        line.replace("\t", "") for line in status.splitlines() if line.startswith(("SigIgn", "SigCgt"))
    )


def _wait_for_ranks(wrapper: subprocess.Popen, results: Path, tree: list[psutil.Process]) -> None:
    """Until rank 0 of the ddp run is training (the injected hang holds it there); `tree` then
    holds the processes below the wrapper, recorded while the tree is whole."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert wrapper.poll() is None, "the tool ended early"
        progress = list(results.glob("*ddp-ws2*/rank0.progress"))
        if progress and any(p in progress[0].read_text() for p in ('"warmup"', '"measuring"')):
            tree[:] = psutil.Process(wrapper.pid).children(recursive=True)
            below = {p.pid: p for p in tree}
            ranks = _rank_pids(progress[0].parent)
            # both ranks, and the agent above them, are in the tree we will check
            if len(ranks) == 2 and all(r in below and _ppid(below[r]) in below for r in ranks):
                return
        time.sleep(0.5)
    pytest.fail("the ranks never started training")


KILLS = {
    # tool: (its command, where the interrupted session's results are, the tool's exit code)
    "time_to_answer": (
        lambda where: [
            str(REPO / "tools" / "time_to_answer.py"),
            f"--results-dir={where}",
            f"--json={where.parent / 'tta.json'}",
            "--",
            "pytest",
            "benchmarks",
            *SESSION,
        ],
        lambda where: where / "latest",  # the session's own folder
        lambda sig: pytest.ExitCode.INTERRUPTED,  # pytest's, and the figures are still written
    ),
    "time_xdist": (  # runs the repository's benchmarks/ (read only), its results where it is told
        lambda where: [str(REPO / "tools" / "time_xdist.py"), f"--results={where}", "--", *SESSION[:2]],
        lambda where: where / "serial" / "latest",
        lambda sig: 128 + sig,
    ),
}


@pytest.mark.parametrize(
    ("tool", "sig"),
    # both signals through both kinds of wrapper (the figures written after; the output captured)
    [("time_to_answer", signal.SIGTERM), ("time_xdist", signal.SIGINT)],
)
def test_ending_a_tool_ends_its_session_and_every_rank(bench, monkeypatch, tool, sig):
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:hang")  # the run is still going when we stop
    command, results_of, exit_code = KILLS[tool]
    where = bench.path / "out"
    log = bench.path / "tool.log"
    with open(log, "wb") as out:
        # as a user's terminal starts it: a suite started as a background job (`cmd &` without job
        # control, nohup) ignores SIGINT, every process it starts inherits that, and the tool then
        # rightly keeps ignoring it (tools/_child.py)
        wrapper = subprocess.Popen(
            [sys.executable, *command(where)],
            cwd=bench.path,
            stdout=out,
            stderr=out,
            preexec_fn=_terminal_signals,  # noqa: PLW1509 (no threads started here)
        )
    tree: list[psutil.Process] = []
    try:
        _wait_for_ranks(wrapper, results_of(where), tree)
        wrapper.send_signal(sig)
        try:
            wrapper.wait(timeout=90)  # the tool's grace period (60 s) and its kill, with room
        except subprocess.TimeoutExpired:
            below = psutil.Process(wrapper.pid).children(recursive=True)
            pytest.fail(
                f"{tool} still running 90 s after {sig.name}; its signal handlers: "
                f"{_handlers(wrapper.pid)}; below it: "
                f"{[(p.pid, p.status(), _cmdline(p)[:120]) for p in below]}\n"
                f"{log.read_text(errors='replace')[-3000:]}"
            )
        out = log.read_text(errors="replace")
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, f"left running after the tool ended: {[_cmdline(p) for p in alive]}\n{out}"
        assert wrapper.returncode == exit_code(sig), out[-3000:]
        (run,) = results_of(where).glob("*ddp-ws2*_results/result.json")
        assert json.loads(run.read_text())["status"] == "interrupted"  # pytest ended it, not a SIGKILL
        if tool == "time_to_answer":
            figures = json.loads((where.parent / "tta.json").read_text())
            assert figures["exit_code"] == pytest.ExitCode.INTERRUPTED and figures["configurations"] == 1
        else:
            assert not (where / "xdist").exists()  # the second session never started
    finally:  # whatever failed, leave nothing running (the tree is recorded before the wrapper dies)
        if wrapper.poll() is None:
            tree += [*psutil.Process(wrapper.pid).children(recursive=True), psutil.Process(wrapper.pid)]
        for proc in tree:
            try:
                proc.kill()
            except psutil.Error:
                pass
        wrapper.wait()


STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
deaf = "import signal, time; signal.signal(15, signal.SIG_IGN); time.sleep(600)"
subprocess.Popen([sys.executable, "-c", deaf], start_new_session=True)
time.sleep(600)
"""
"""A session that ignores SIGTERM, with a child in a session of its own that ignores it too."""


def test_a_session_that_will_not_end_is_killed_after_the_grace_period(tmp_path):
    tool = f"import sys; sys.path.insert(0, {str(REPO / 'tools')!r}); from _child import run_session; "
    tool += f"run_session([sys.executable, '-c', {STUBBORN!r}], grace_s=1)"
    wrapper = subprocess.Popen([sys.executable, "-c", tool])
    tree: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while len(tree) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            tree = psutil.Process(wrapper.pid).children(recursive=True)
        assert len(tree) == 2, "the session never started its child"
        started = time.monotonic()
        wrapper.send_signal(signal.SIGTERM)
        assert wrapper.wait(timeout=20) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 10  # the grace period (1 s) and a kill, not the sleep
        _, alive = psutil.wait_procs(tree, timeout=5)
        assert not alive
    finally:
        for proc in [*tree, psutil.Process(wrapper.pid)] if wrapper.poll() is None else tree:
            try:
                proc.kill()
            except psutil.Error:
                pass
        wrapper.wait()


def _copy_of_the_checkout(dest: Path) -> None:
    """The working tree as it is (tracked files and new ones git does not ignore) in a fresh
    repository of its own, committed: `git status` there shows only what happened since."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "checkout"], cwd=dest, check=True)


SMALL = [
    "--llmbench-launch=inprocess",
    "--llmbench-strategies=ddp",
    "--llmbench-world-sizes=1",
    "--llmbench-steps=3",
    "--llmbench-warmup=1",
]
GATE = ["--sessions=1", "--repeat=1", "--steps=3", "--seq-lens=64"]
TOOLS = [
    # each CPU tool once, the way its docstring shows, with the smallest arguments that do real work;
    # the lines run side by side, the tools of a line one after the other
    [
        ["tools/time_to_answer.py", "--", "pytest", "benchmarks/test_pretrain.py", *SMALL],
        ["tools/gpu/checks.py"],  # reads results/, which time_to_answer.py has just written into
    ],
    [
        ["tools/measure_overhead.py", "--steps=2", "--warmup=1", "--repeats=1"],
        ["tools/peak_table.py", "docs/results/2026-11-24-h100-verdicts/runs/encdec-after-fix"],
        ["tools/window_budget.py", "docs/results/2026-11-24-h100-verdicts/runs/host-b", "--budgets=20"],
        ["tools/warmup_steps.py", "docs/results/2026-11-26-h100-whole-suite/runs/call-A"],
        ["tools/scale_validation.py", "docs/results/2026-11-27-h200x2-overlap/runs-host3"],
        [
            "tools/eta_replay.py",
            "docs/results/2026-11-27-h200x2-side-by-side/runs/pretrain-final-side-by-side",
        ],
        ["tools/suite_plan.py", "docs/results/2026-11-27-h200x2-many-gpus/tta_pretrain.json", "--gpus=2,8"],
        [
            "tools/gate_replay.py",
            "docs/results/2026-11-26-h100-pretrain-fresh-host-2/runs.tgz",
            "--max-pairs=1",
        ],
    ],
    [["tools/time_xdist.py", "-n", "1", "--", *SMALL]],
    [
        ["tools/gate_error_rates.py", "collect", "{tmp}/gate", *GATE],
        ["tools/gate_error_rates.py", "analyse", "{tmp}/gate"],  # one session: read, nothing to pair
        # a GPU comparison (four sessions or more): its imports and arguments only; it writes to /tmp
        ["tools/gpu/warm_vs_isolated.py", "--help"],
    ],
]
"""Not run: tools/dev.sh (it installs .venv), tools/gpu/*.sh (a GPU host's, writing to $OUT)."""


def test_no_tool_writes_into_the_working_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", TORCH_EXTENSIONS_DIR)
    for name in ("LLMBENCH_INJECT_FAULT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    tree = tmp_path / "checkout"
    _copy_of_the_checkout(tree)
    lines = []
    for i, line in enumerate(TOOLS):
        script = " && ".join(
            shlex.join([sys.executable, *(a.replace("{tmp}", str(tmp_path)) for a in tool)]) for tool in line
        )
        log = tmp_path / f"line{i}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["sh", "-c", script], cwd=tree, stdout=out, stderr=out, start_new_session=True
            )
        lines.append((line, log, proc))
    try:
        for line, log, proc in lines:
            assert proc.wait(timeout=300) == 0, f"{line}:\n{log.read_text()[-3000:]}"
    finally:  # one line failed: the others stop too
        for _, _, proc in lines:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert status == "", f"a tool wrote into the working tree:\n{status}"
    # what time_to_answer.py wrote by default went under results/, which git ignores
    (figures,) = tree.glob("results/time-to-answer-*/time_to_answer.json")
    assert json.loads(figures.read_text())["configurations"] == 1
    assert os.listdir(tmp_path / "gate") == ["a-01"]
