"""Launcher mode (`pytest benchmarks/` without torchrun): each configuration runs as its own
torchrun group, and no hang, crash or interrupt loses a result or leaves a process behind.

Faults are injected with LLMBENCH_INJECT_FAULT inside the real training step of a real group.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FEW_STEPS, RUNS, SharedBench, saved_results, trained_once


def runs(path: Path) -> dict[str, dict]:
    return {f"{d['strategy']}-ws{d['world_size']}": d for d in saved_results(path)}


def leftover_processes(marker: str) -> list[str]:
    """llmbench's processes that a session in `marker` (the test's own directory) started: its
    agents and ranks, and the fork server it forks CPU agents from. New processes name `marker` in
    their command line (a group's directory); forks keep their server's command line, so their
    working directory, the session's, tells instead."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        named = marker in cmdline and "llmbench_pytest.worker.main" in cmdline
        forked = cwd.startswith(marker) and "llmbench_pytest.launch.forkserver" in cmdline
        if named or forked:
            found.append(f"{proc.name}: {cmdline[:200]} (in {cwd})")
    return found


KILLED = "killed_rank_matrix"


def killed_rank_session(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    """One launcher session, trained once per test process, for the tests marked
    xdist_group(KILLED), here and in test_check_faults.py: world sizes 1, 2 and 4 (4 is skipped on
    fewer cores), each its own torchrun group, with rank 1 of the two-rank ddp run killed by
    SIGKILL; zero2 then trains at world size 2 in a fresh group, its rank 1 a straggler that sleeps
    1 s before every optimizer step. World size 1 has no rank 1: its ddp and zero2 runs are healthy."""
    return trained_once(
        shared_bench,
        KILLED,
        "benchmarks",
        *FEW_STEPS,
        "--llmbench-strategies=ddp,zero2",
        "--llmbench-world-sizes=1,2,4",
        "-v",
        "-rs",
        env={"LLMBENCH_INJECT_FAULT": "ddp:kill:1,zero2:slow=1.0:1"},
    )


@pytest.fixture
def killed_rank_matrix(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    return killed_rank_session(shared_bench)


@pytest.mark.xdist_group(KILLED)
def test_benchmarks_of_every_file_run_world_size_first_together_and_other_tests_keep_their_places():
    from types import SimpleNamespace

    from llmbench_pytest.plugin import pytest_collection_modifyitems

    def bench(file: str, cid: str, ws: int | None) -> SimpleNamespace:
        spec = SimpleNamespace(world_size=ws) if ws else None  # None: skipped at collection
        return SimpleNamespace(
            nodeid=f"{file}::t[{cid}]", callspec=SimpleNamespace(params={"llmbench": spec}, id=cid)
        )

    items = [
        bench("a.py", "ddp-ws1-x", 1), bench("a.py", "ddp-ws2-x", 2), SimpleNamespace(nodeid="c.py::plain"),
        bench("b.py", "zero2-ws1-x", 1), bench("b.py", "nvme-ws1-x", None), bench("b.py", "zero2-ws2-x", 2),
    ]  # fmt: skip
    pytest_collection_modifyitems(SimpleNamespace(stash={}), items)
    # one warm group per world size across the files: a.py's and b.py's ws1, then both ws2
    assert [i.nodeid for i in items] == [
        "a.py::t[ddp-ws1-x]", "b.py::t[zero2-ws1-x]", "c.py::plain",
        "b.py::t[nvme-ws1-x]", "a.py::t[ddp-ws2-x]", "b.py::t[zero2-ws2-x]",
    ]  # fmt: skip


def test_world_sizes_run_as_groups_with_per_rank_logs(killed_rank_matrix):
    bench, result = killed_rank_matrix
    result.assert_outcomes(passed=3, failed=1, skipped=2)  # the failure: ddp-ws2's killed rank
    # world size first: each world size's configurations follow one another
    result.stdout.fnmatch_lines(
        [
            "*test_pretrain?ddp-ws1-seq128-llama-tiny? PASSED*",
            "*test_pretrain?zero2-ws1-seq128-llama-tiny? PASSED*",
            "*test_pretrain?ddp-ws2-seq128-llama-tiny? FAILED*",
            "*test_pretrain?zero2-ws2-seq128-llama-tiny? PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(["*world size 4 needs 4 CPU cores (one per rank); this machine has *"])
    found = runs(bench.path)
    assert set(found) == {"ddp-ws1", "ddp-ws2", "zero2-ws1", "zero2-ws2"}
    # one group per world size: world size 1's rank served ddp and then zero2
    ws1 = [found[f"{s}-ws1"] for s in ("ddp", "zero2")]
    assert [r["timing"]["launch"]["ranks"] for r in ws1] == ["fresh", "warm"]
    assert len({r["per_rank"][0]["pid"] for r in ws1}) == 1
    zero2 = found["zero2-ws2"]
    assert zero2["mode"] == "launcher" and zero2["ranks_per_node"] == 2 and zero2["nodes"] == 1
    assert zero2["timing"]["launch"]["to_first_progress_sec"] > 0
    run_dir = next(bench.path.glob(f"{RUNS}/bench-*-zero2-ws2-seq128_results"))
    for rank in (0, 1):
        assert f"measured {zero2['steps']} steps" in (run_dir / f"rank{rank}.log").read_text()
    assert "zero2" in run_dir.with_name(run_dir.name.removesuffix("_results") + ".log").name


def test_a_failed_or_hung_rank_is_named_at_once_and_the_next_test_runs(bench, monkeypatch):
    # ddp: rank 1 hangs before its first measured step, rank 0 waits in DDP's all-reduce until
    # gloo's 8 s timeout: the rank named is the one behind in the group's collectives, not the
    # one that timed out waiting. zero0, in the fresh group after it: rank 1 runs out of memory while
    # rank 0 waits in a collective: the launcher ends the group on rank 1's own report, well before
    # the timeout
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:hang:1,zero0:oom:1")
    started = time.monotonic()
    result = bench.runpytest_subprocess(
        "benchmarks",
        *FEW_STEPS,
        "--llmbench-strategies=ddp,zero0",
        "--llmbench-world-sizes=2",
        "--llmbench-timeout=8",
        "-v",
        "-p",
        "no:randomly",
    )
    elapsed = time.monotonic() - started
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*Failed: ddp error: hang: rank 1 stopped: it stopped first: it issued * collectives on the "
            "training group where the others issued *, so they wait for it inside a collective; last "
            "lines of rank1.log:*",
            "*rank1 INFO warmup 1/1 loss*",
        ]
    )
    result.stdout.fnmatch_lines(["*while waiting for it: rank 0: *Timed out*"])
    result.stdout.fnmatch_lines(["*the group was ended (SIGTERM, then SIGKILL).*"])
    result.stdout.fnmatch_lines(["*Failed: zero0 oom: rank 1: *OutOfMemoryError*"])
    found = runs(bench.path)
    assert found["ddp-ws2"]["status"] == "error" and found["ddp-ws2"]["failed_ranks"][0] == 1
    zero0 = found["zero0-ws2"]
    assert zero0["status"] == "oom" and zero0["error"].startswith("rank 1:"), zero0["error"]
    assert zero0["failed_ranks"] == [1] and "Timed out" not in zero0["error"]
    # reported by the failed rank itself: the group ended before the 8 s collective timeout
    waited = re.search(r"the group was ended (\d+) s later", zero0["error"])
    assert waited and int(waited.group(1)) < 8, zero0["error"]
    assert elapsed < 150, f"took {elapsed:.0f} s"
    assert not leftover_processes(str(bench.path))


@pytest.mark.xdist_group(KILLED)
def test_killed_rank_is_reported_with_its_signal(killed_rank_matrix):
    bench, result = killed_rank_matrix
    result.assert_outcomes(passed=3, failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*test_pretrain?ddp-ws2-seq128-llama-tiny? FAILED*",
            "*test_pretrain?zero2-ws2-seq128-llama-tiny? PASSED*",
            "*Failed: ddp error: rank 1 died (signal 9 (SIGKILL)); last lines of rank1.log:*",
        ]
    )
    found = runs(bench.path)
    assert found["ddp-ws2"]["status"] == "error" and found["ddp-ws2"]["failed_ranks"][0] == 1
    assert found["zero2-ws2"]["status"] == "ok"  # the next configuration, in a fresh group
    assert not leftover_processes(str(bench.path))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupt_keeps_finished_results_and_ends_the_workers(bench, monkeypatch, sig):
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "zero0:hang")  # zero0 is still running when we stop
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks",
        *FEW_STEPS,
        "--llmbench-strategies=ddp,zero0",
        "--llmbench-world-sizes=2",
        "--benchmark-autosave",
        "--benchmark-storage=file://./store",
    ]
    # a shell that starts the suite in the background (nohup, `cmd &`) ignores SIGINT, and an
    # ignored signal stays ignored across exec: the child would never see the interrupt. A handler
    # set here is reset to the default in the child, which Python turns into KeyboardInterrupt.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, cwd=bench.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            zero0 = list(bench.path.glob(f"{RUNS}/*zero0*/rank0.progress"))
            if zero0 and "warmup" in zero0[0].read_text():
                break
            time.sleep(0.5)
        else:
            pytest.fail("zero0 never started")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # not left running (with its group) behind a failed test
            proc.kill()
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()[-2000:]
    found = runs(bench.path)
    assert found["ddp-ws2"]["status"] == "ok"  # finished before the interrupt: intact
    assert found["zero0-ws2"]["status"] == "interrupted"
    (saved,) = bench.path.glob("store/*/0001_*.json")  # the finished run is in benchmark storage
    assert [b["name"] for b in json.loads(saved.read_text())["benchmarks"]] == [
        "test_pretrain[ddp-ws2-seq128-llama-tiny]"
    ]
    assert not leftover_processes(str(bench.path))


def test_repeats_report_mean_and_spread(bench, monkeypatch):
    args = [
        "benchmarks",
        *FEW_STEPS,
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-repeat=3",
        # CPU runs swing from one repeat to the next, more so on a shared machine: the tokens/s CV
        # between repeats (step_time_cv, 10% by default; test_check_faults fails it on purpose)
        # is not what this test is about
        "--llmbench-max-cv=0.9",
    ]
    # every measured step sleeps 0.2 s: the repeats' tokens/s then differ by the machine's share
    # of a step, not by its load from one repeat to the next (a load burst could make one repeat
    # several times faster than another and fail the generous bound below)
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:slow=0.2")
    result = bench.runpytest_subprocess(*args, "--llmbench-max-repeat-spread=0.9")
    result.assert_outcomes(passed=1)
    files = sorted(bench.path.glob(f"{RUNS}/*_results/result.json"))
    assert len(files) == 3  # every repeat keeps its own result
    last = json.loads(next(bench.path.glob(f"{RUNS}/*-r3_results/result.json")).read_text())
    rep = last["repeats"]
    assert rep["count"] == 3 and len(rep["tokens_per_sec"]) == 3 and rep["tokens_per_sec_std"] > 0
    # a slowed run says so: the gate's prior of the noise between sessions must not pool it
    assert last["injected_fault"] == "ddp:slow=0.2"
    check = next(c for c in last["checks"] if c["name"] == "repeat_spread")
    assert check["passed"] is True and "tokens/s over 3 repeats" in check["message"]

    strict = bench.runpytest_subprocess(*args, "--llmbench-max-repeat-spread=0.0001")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*repeat_spread: ddp: repeats disagree: tokens/s over 3 repeats:*> 0.0%*"])


def test_unwritable_results_directory_is_refused_before_training(bench):
    (bench.path / "a_file").write_text("not a directory")
    result = bench.runpytest_subprocess("benchmarks", "--llmbench-results-dir=a_file/results")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*results directory '*a_file/results' is not writable (*--llmbench-results-dir=DIR*"]
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--llmbench-world-sizes=0"], "*--llmbench-world-sizes: must be 1 or more; got 0*"),
        (["--llmbench-world-sizes=two"], "*--llmbench-world-sizes: must be a whole number; got 'two'*"),
        (["--llmbench-repeat=0"], "*--llmbench-repeat: must be 1 or more; got 0*"),
        (["--llmbench-launch=ssh"], "*--llmbench-launch: must be one of torchrun, inprocess; got 'ssh'*"),
        (["--llmbench-timeout=-5"], "*--llmbench-timeout: must be a number above 0; got '-5'*"),
        (
            ["--llmbench-launch=inprocess", "--llmbench-world-sizes=1,2"],
            "*--llmbench-launch=inprocess runs world size 1 only*got --llmbench-world-sizes=1,2*",
        ),
    ],
)
def test_bad_launcher_options(bench, args, line):
    result = bench.runpytest_subprocess("benchmarks", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
