"""Warm ranks (issue 14): a torchrun group serves the configurations of its world size one after
another, a fault ends it, `--llmbench-isolate` gives each configuration its own, and nothing a
configuration leaves behind shows in the next one's numbers. Real torchrun groups on CPU (gloo)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launcher import leftover_processes
from test_leftover import HANDED_BACK, handed_back_session

from conftest import REPO, RUNS, SharedBench, runs_by_config, trained_once
from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.launch import group as launch_group
from llmbench_pytest.launch.launcher import MEASUREMENT_FILE, Launch, RankPool, read_heartbeat
from llmbench_pytest.worker import main as worker_main
from llmbench_pytest.worker.progress import PHASES

SHORT = ["--llmbench-warmup=1", "--llmbench-steps=3"]


def pids(run: dict) -> list[int]:
    return [r["pid"] for r in run["per_rank"]]


def test_file_names_are_shared_by_launcher_and_worker(tmp_path):
    assert launch_group.job_path(tmp_path, 7) == worker_main.job_path(tmp_path, 7)
    assert MEASUREMENT_FILE == worker_main.MEASUREMENT_FILE


WARM = "warm_matrix"


def warm_matrix_session(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    """One session, trained once per test process, for the tests marked xdist_group(WARM), here and
    in test_faults.py and test_check_faults.py: ddp, zero1, fsdp, fsdp_grad_op and zero2 at world
    size 2 (two ranks: what a warm group keeps between configurations is per rank), with fsdp
    running out of memory. One group serves ddp, then zero1 and fsdp warm; the out-of-memory error
    ends it, and fsdp_grad_op starts a fresh one, which then serves zero2, run by DeepSpeed at ZeRO
    stage 1 (a zero2 that keeps full gradients: its model-states check fails, its run does not).
    World size 1's group and the world-size-first order: test_launcher's
    test_world_sizes_run_as_groups_with_per_rank_logs."""
    return trained_once(
        shared_bench,
        WARM,
        "benchmarks",
        *SHORT,
        "--llmbench-strategies=ddp,zero1,fsdp,fsdp_grad_op,zero2",
        "--llmbench-world-sizes=2",
        "-v",
        env={"LLMBENCH_INJECT_FAULT": "fsdp:oom,zero2:stage=1"},
    )


@pytest.fixture
def warm_matrix(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    return warm_matrix_session(shared_bench)


@pytest.mark.xdist_group(WARM)
def test_a_warm_group_serves_its_world_size_and_a_fault_starts_a_fresh_one(warm_matrix):
    bench, result = warm_matrix
    result.assert_outcomes(passed=3, failed=2)  # fsdp's out-of-memory error; zero2's model states
    result.stdout.fnmatch_lines(
        [
            "*test_pretrain?ddp-ws2-*PASSED*",
            "*test_pretrain?zero1-ws2-*PASSED*",
            "*test_pretrain?fsdp-ws2-*FAILED*",
            "*test_pretrain?fsdp_grad_op-ws2-*PASSED*",
            "*test_pretrain?zero2-ws2-*FAILED*",
        ]
    )
    runs = runs_by_config(bench.path)
    ddp, zero1, fsdp, after, zero2 = (
        runs[f"{s}-ws2"] for s in ("ddp", "zero1", "fsdp", "fsdp_grad_op", "zero2")
    )
    launches = [r["timing"]["launch"] for r in (ddp, zero1, fsdp, after, zero2)]
    assert [x["ranks"] for x in launches] == ["fresh", "warm", "warm", "fresh", "warm"], launches
    assert [x["group_configuration"] for x in launches] == [1, 2, 3, 1, 2]
    assert zero1["status"] == "ok" and fsdp["status"] == "oom"
    # a failed check is the run's verdict, not a fault of its ranks: the group goes on
    assert zero2["status"] == "ok" and pids(zero2) == pids(after)
    # the same processes trained ddp, zero1 and then fsdp; the out-of-memory error ended them
    assert len(pids(ddp)) == 2 and pids(ddp) == pids(zero1) == pids(fsdp)
    assert not set(pids(after)) & set(pids(ddp))
    assert ddp["timing"]["rank_process"]["configuration"] == 1
    assert after["status"] == "ok" and after["timing"]["rank_process"]["configuration"] == 1
    # each configuration keeps its own rank logs and heartbeat beside its result
    fsdp_dir = next(bench.path.glob(f"{RUNS}/*-fsdp-ws2-seq128_results"))
    for rank in (0, 1):
        log = (fsdp_dir / f"rank{rank}.log").read_text()
        assert "configuration 3 of this process" in log  # fsdp's lines only:
        assert "for ddp" not in log and "for zero1" not in log
        assert read_heartbeat(fsdp_dir / f"rank{rank}.progress")["phase"] in PHASES
    # the configuration's own log names its ranks and where their output is, though torchrun
    # itself had nothing to say while its ranks were healthy
    own = fsdp_dir.with_name(fsdp_dir.name.removesuffix("_results") + ".log").read_text()
    assert "warm ranks (configuration 3 of this group)" in own and f"{fsdp_dir.name}/rank<k>.log" in own
    assert not leftover_processes(str(bench.path))
    assert not list(bench.path.glob("results/.llmbench-ranks/*")), "group directories are removed"


@pytest.mark.xdist_group(WARM)
def test_warm_and_isolated_runs_agree(bench, warm_matrix):
    shared, _ = warm_matrix  # there ddp and then zero1 trained in one warm group at world size 2
    args = ["benchmarks", *SHORT, "--llmbench-strategies=ddp,zero1", "--llmbench-world-sizes=2"]
    bench.runpytest_subprocess(
        *args, "--llmbench-results-dir=isolated", "--llmbench-isolate"
    ).assert_outcomes(passed=2)
    runs = runs_by_config(shared.path)
    warm = {s: runs[f"{s}-ws2"] for s in ("ddp", "zero1")}
    iso = {
        d["strategy"]: d
        for d in map(json.loads, map(Path.read_text, bench.path.glob("isolated/latest/*/result.json")))
    }
    assert warm["zero1"]["timing"]["launch"]["ranks"] == "warm"
    assert [iso[s]["timing"]["launch"]["ranks"] for s in ("ddp", "zero1")] == ["fresh", "fresh"]
    assert iso["zero1"]["timing"]["launch"]["isolated"] is True
    assert pids(warm["ddp"]) == pids(warm["zero1"]) and pids(iso["ddp"]) != pids(iso["zero1"])
    for name in ("ddp", "zero1"):
        # same seed, same weights, same data, same arithmetic: the second configuration of a warm
        # group trains exactly as a fresh group does, and holds exactly the same model states
        assert warm[name]["losses"] == iso[name]["losses"], name
        assert warm[name]["warmup_losses"] == iso[name]["warmup_losses"], name
        assert warm[name]["model_state_gb"] == iso[name]["model_state_gb"], name


PEAKS = """
import pytest

@pytest.mark.llmbench(strategies="ddp")
def test_a_small(llmbench):
    llmbench.train()

@pytest.mark.llmbench(
    strategies="ddp", model_config="hidden_size=768,intermediate_size=2048,num_hidden_layers=2"
)
def test_b_big(llmbench):
    llmbench.train()

@pytest.mark.llmbench(strategies="ddp")
def test_c_small_again(llmbench):
    llmbench.train()
"""


def test_a_small_configuration_after_a_big_one_reports_its_own_peak(bench):
    # one group serves all three: the small configuration fresh (the first in its process), the
    # big one, and the small one again, warm
    bench.makepyfile(test_peaks=PEAKS)
    result = bench.runpytest_subprocess(
        "test_peaks.py", *SHORT, "--llmbench-world-sizes=1", "--benchmark-disable"
    )
    result.assert_outcomes(passed=3)
    found = sorted(
        map(json.loads, map(Path.read_text, bench.path.glob(f"{RUNS}/*/result.json"))),
        key=lambda d: d["timing"]["launch"]["group_configuration"],
    )
    fresh, big, small = found
    assert [d["timing"]["launch"]["ranks"] for d in found] == ["fresh", "warm", "warm"]
    assert fresh["params"] == small["params"] < big["params"]
    assert pids(small) == pids(big) == pids(fresh)
    assert small["model_state_gb"] == fresh["model_state_gb"]
    # the peak resident set is reset at the window and the big run's memory was handed back: the
    # small run's peak is its own, not the big one's (which is hundreds of MB higher)
    gap = big["peak_host_rss_gb"] - fresh["peak_host_rss_gb"]
    assert gap > 0.2, (big["peak_host_rss_gb"], fresh["peak_host_rss_gb"])
    assert small["peak_host_rss_gb"] < fresh["peak_host_rss_gb"] + gap / 4, (
        small["peak_host_rss_gb"],
        fresh["peak_host_rss_gb"],
        big["peak_host_rss_gb"],
    )


def test_progress_reaches_the_callback_and_the_next_configuration_is_warm(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the launcher passes on rank 0's latest heartbeat each time it looks (every 0.05 s): measured
    # steps slowed to 0.4 s each keep the measuring phase in view for 1.6 s, however fast the CPU
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:slow=0.4")
    spec = RunSpec(
        strategy="ddp", model="llama-tiny", seq_len=64, per_device_batch=2, steps=4, warmup=1, dtype="fp32"
    )
    pool = RankPool(tmp_path / "results")
    seen: list[dict] = []
    try:
        outcomes = []
        for k in range(2):
            run_dir = tmp_path / "results" / f"run{k}"
            run_dir.mkdir(parents=True)
            launch = Launch(run_dir=run_dir, log_path=tmp_path / f"run{k}.log", world_size=1)
            outcomes.append((pool.run(spec, launch, 120.0, str(REPO), seen.append), launch.timings))
        # the session's end: the ranks leave by themselves once let go, and close() only waits
        group = pool.group
        assert group is not None and group.alive
        pool.let_go()
        deadline = time.monotonic() + 60
        while group.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group.alive, "the ranks did not leave after let_go()"
        jobs = [json.loads(p.read_text()) for p in sorted(group.dir.glob("job-*.json"))]
    finally:
        pool.close()
    assert len(jobs) == 3 and jobs[-1] == {"stop": True}, jobs  # close() posted no second stop
    assert [m.status for m, _ in outcomes] == ["ok", "ok"]
    assert [t["ranks"] for _, t in outcomes] == ["fresh", "warm"]
    assert all("message" in beat and "time" in beat for beat in seen)
    phases = {beat.get("phase") for beat in seen} - {None}
    assert phases <= set(PHASES) and "measuring" in phases, phases
    measuring = [b for b in seen if b.get("phase") == "measuring" and "steps" in b]
    assert measuring and all(b["steps"] == 4 and 1 <= b["step"] <= 4 for b in measuring)
    assert (tmp_path / "run0.log").exists() and (tmp_path / "run1.log").exists()


def test_sigkill_of_pytest_ends_its_ranks_within_seconds(bench, monkeypatch):
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:hang")  # the ranks sit in their first step
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks",
        *SHORT,
        "--llmbench-strategies=ddp",
        "--llmbench-world-sizes=2",
    ]
    proc = subprocess.Popen(cmd, cwd=bench.path, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            beats = list(bench.path.glob(f"{RUNS}/*_results/rank1.progress"))
            if (
                beats
                and read_heartbeat(beats[0]).get("phase") == "warmup"
                and leftover_processes(str(bench.path))
            ):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the ranks never reached their warm-up")
        time.sleep(2)  # into the (hanging) first measured step
        assert len(leftover_processes(str(bench.path))) >= 2  # the agent and its two ranks
    finally:
        proc.send_signal(signal.SIGKILL)  # no handler runs: only the kernel can end the ranks
        proc.wait()
    left = leftover_processes(str(bench.path))
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftover_processes(str(bench.path))
    assert not left, left


@pytest.fixture
def handed_back(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    return handed_back_session(shared_bench)


@pytest.mark.xdist_group(HANDED_BACK)
def test_a_failed_teardown_keeps_the_figures_and_ends_the_warm_group(handed_back):
    # test_leftover's session: fsdp_grad_op's teardown raises; zero3 trains after it
    bench, result = handed_back
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_pretrain?fsdp_grad_op-ws1-seq128-llama-tiny? FAILED*",
            "*test_pretrain?zero3-ws1-seq128-llama-tiny? PASSED*",
        ]
    )
    runs = runs_by_config(bench.path)
    failed, after = runs["fsdp_grad_op-ws1"], runs["zero3-ws1"]
    assert failed["status"] == "error" and "teardown failed: RuntimeError: injected" in failed["error"]
    # what the window measured is in the failed run's record of its rank
    mine = failed["per_rank"][0]
    assert mine["mean_step_time_sec"] > 0 and mine["model_state_gb"] > 0 and mine["peak_host_rss_gb"] > 0
    # the process that could not clean up served no further configuration
    assert [r["timing"]["launch"]["ranks"] for r in (failed, after)] == ["fresh", "fresh"]
    assert after["status"] == "ok" and not set(pids(after)) & set(pids(failed))
