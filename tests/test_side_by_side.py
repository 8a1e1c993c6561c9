"""Side by side: configurations of one world size train at once on disjoint GPUs (lanes), those
that lean on what a lane does not divide run alone, and every run says how it shared the node."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from conftest import FEW_STEPS, GPU_HOST, saved_results, trained_once
from llmbench_pytest.config import host_share
from llmbench_pytest.config.hardware import Hardware
from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.launch.lanes import LANE_ENV, Lane, alone_reason, lane_count, lanes
from llmbench_pytest.results.measurement import Measurement
from llmbench_pytest.session.eta import Eta, Planned
from llmbench_pytest.session.progress import Progress
from llmbench_pytest.worker import link_probe

LANES = "side_by_side_session"
KILLED_FIRST = "side_by_side_stopped"


def spec(**changes) -> RunSpec:
    base = RunSpec(
        strategy="ddp", model="llama-tiny", seq_len=128, per_device_batch=2, steps=10, warmup=2, dtype="fp32"
    )
    return base.replace(**changes)


@pytest.mark.parametrize(
    ("world_size", "device", "gpus", "setting", "count"),
    [
        (1, "cuda", 2, "auto", 2),  # a 2-GPU node: two world-size-1 configurations at once
        (2, "cuda", 2, "auto", 1),  # world size 2 takes the node
        (2, "cuda", 4, "auto", 2),
        (1, "cuda", 8, "3", 3),  # at most what the user allows
        (4, "cuda", 8, "3", 2),  # and never more than the GPUs
        (1, "cuda", 8, "no", 1),
        (1, "cpu", 0, "auto", 1),  # a CPU's ranks compute on the host: one at a time unless asked
        (1, "cpu", 0, "2", 2),
    ],
)
def test_lanes_per_world_size(world_size, device, gpus, setting, count):
    assert lane_count(world_size, device, gpus, setting) == count


def test_each_lane_has_its_own_gpus_and_its_ranks_share_of_the_cores():
    two = lanes(1, 2, ["0", "1"], list(range(32)))
    assert [(la.gpus, la.cores) for la in two] == [(("0",), tuple(range(16))), (("1",), tuple(range(16, 32)))]
    # world size 2 on 4 of the GPUs the user made visible: each rank 16 of the 64 cores, as 4 ranks of
    # one configuration would have them
    pairs = lanes(2, 2, ["4", "5", "6", "7"], list(range(64)))
    assert [la.gpus for la in pairs] == [("4", "5"), ("6", "7")]
    assert pairs[1].cores == tuple(range(32, 64))
    env = pairs[1].env({}, "cuda")
    assert env["CUDA_VISIBLE_DEVICES"] == "6,7" and env["OMP_NUM_THREADS"] == "16"
    assert env[host_share.BIND_ENV] == ",".join(str(c) for c in range(32, 64))
    # the user's own thread count is kept; the GPUs are still the lane's
    assert pairs[0].env({"OMP_NUM_THREADS": "4"}, "cuda") == {
        host_share.POLICY_ENV: "user",
        "CUDA_VISIBLE_DEVICES": "4,5",
        LANE_ENV: "1/2",
    }
    # a rank's share does not depend on how many lanes run: two lanes on an 8-GPU node, 8 cores each
    few = lanes(1, 2, [str(g) for g in range(8)], list(range(64)))
    assert [la.cores for la in few] == [tuple(range(8)), tuple(range(8, 16))]
    assert pairs[1].to_dict() == {"lane": 2, "lanes": 2, "gpus": ["6", "7"], "cores": "32-63"}
    # a CPU lane is not bound: its ranks are the host's compute
    assert lanes(1, 2, [], list(range(2)))[0] == Lane(0, 2, 1, (), ())


def test_the_link_probe_reads_the_lanes_variable():
    assert link_probe.LANE_ENV == LANE_ENV


def _side(plan, gpus=4, pool=None):
    from llmbench_pytest.session.side_by_side import SideBySide

    return SideBySide(
        [(f"t[{i}]", s) for i, s in enumerate(plan)],
        "auto",
        "cuda",
        [str(g) for g in range(gpus)],
        list(range(8)),
        new_pool=pool or (lambda env: None),
        prepare=lambda nodeid, spec: (None, {}),
        free_node=lambda: None,
        timeout_s=60.0,
        repo_dir=".",
    )


def test_a_world_size_has_lanes_only_where_two_of_its_configurations_may_share():
    side = _side([spec(world_size=1), spec(world_size=2), spec(strategy="fsdp", world_size=2)])
    assert side.lanes_at(1) == 1 and not side.takes(spec(world_size=1))  # alone: every core, as ever
    assert side.lanes_at(2) == 2 and side.at_once(spec(world_size=2)) == 2
    # an offload run does not count: it never shares
    side = _side([spec(world_size=1), spec(strategy="zero2", offload="cpu", world_size=1)])
    assert side.lanes_at(1) == 1
    three = _side([spec(strategy=s) for s in ("ddp", "fsdp", "zero2")], gpus=8)
    assert three.lanes_at(1) == 3  # not 8: no more lanes than configurations to fill them


def test_what_loads_the_host_runs_alone():
    assert alone_reason(spec()) is None
    assert alone_reason(spec(strategy="zero3", device="cuda")) is None
    assert "CPU offload" in alone_reason(spec(strategy="zero2", offload="cpu"))
    assert "NVMe" in alone_reason(spec(strategy="zero3", offload="nvme", nvme_path="/nvme"))
    assert "disk" in alone_reason(spec(workload="seq2seq", data="disk"))


def _items(*cases: tuple[str, int, str]) -> list[SimpleNamespace]:
    out = []
    for name, ws, offload in cases:
        s = spec(strategy=name, world_size=ws, offload=offload)
        out.append(
            SimpleNamespace(
                nodeid=f"t[{name}-{offload}-ws{ws}]",
                callspec=SimpleNamespace(params={"llmbench": s}, id=name),
            )
        )
    return out


@pytest.mark.parametrize(
    ("gpus", "setting", "offload_last"), [(2, "auto", True), (2, "no", False), (1, "auto", False)]
)
def test_on_lanes_what_runs_alone_comes_last_in_its_world_size(gpus, setting, offload_last):
    from llmbench_pytest.plugin import pytest_collection_modifyitems
    from llmbench_pytest.session.state import SESSION_KEY

    session = SimpleNamespace(
        mode="launcher",
        options=SimpleNamespace(side_by_side=setting, repeat=1, find_batch=False),
        hardware=lambda: Hardware(device="cuda", gpu_count=gpus),
    )
    config = SimpleNamespace(stash={SESSION_KEY: session}, getoption=lambda name, default=None: default)
    items = _items(("ddp", 2, "none"), ("zero2", 1, "cpu"), ("ddp", 1, "none"), ("zero3", 1, "none"))
    pytest_collection_modifyitems(config, items)
    order = [i.nodeid for i in items]
    if offload_last:  # the lanes' ranks leave once, before the configurations that run alone
        assert order == ["t[ddp-none-ws1]", "t[zero3-none-ws1]", "t[zero2-cpu-ws1]", "t[ddp-none-ws2]"]
    else:
        assert order == ["t[zero2-cpu-ws1]", "t[ddp-none-ws1]", "t[zero3-none-ws1]", "t[ddp-none-ws2]"]


def test_the_eta_shares_a_configurations_time_with_those_beside_it():
    eta = Eta({n: Planned(n, n, "ddp", 10.0, at_once) for n, at_once in (("a", 2), ("b", 2), ("c", 1))})
    assert eta.remaining_s(now=0.0) == pytest.approx(10.0 / 2 + 10.0 / 2 + 10.0)
    eta.start("a", 0.0)
    eta.start("b", 0.0)
    assert eta.running() == 2
    eta.finish("b", 6.0)  # a lane's run ends when it ends, whenever its test reports it
    assert eta.finish("b", 50.0) == pytest.approx(6.0)


def test_the_display_learns_a_lanes_run_when_it_ended_not_when_its_test_reported(monkeypatch):
    lines: list[str] = []
    screen = SimpleNamespace(line=lines.append)
    progress = Progress([Planned("a", "a", "ddp", 10.0, 2), Planned("b", "b", "ddp", 10.0, 2)], screen)
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    progress.config_started("a", None)
    progress.config_began("b", None, worker="lane 2/2")  # ahead of its test, on the other lane
    now[0] = 104.0
    progress.config_ended("b", ok=True, at=104.0)
    now[0] = 130.0  # its test reports much later
    progress.config_started("b", None)  # no second start line
    progress.config_finished("b", None, summary={"status": "ok", "tokens_per_sec": 1000.0})
    assert [ln.split(" · ")[0] for ln in lines] == [
        "llmbench [1/2] a started",
        "llmbench [2/2] lane 2/2 b started",
        "llmbench [2/2] b ok in 4.0 s, 1,000 tokens/s",
    ]


def lanes_session(shared_bench):
    """Five world-size-1 configurations on two lanes of a CPU (a smoke of the scheduling: CPU
    lanes are not bound, and nothing here is a speed), rank 0 of zero1 killed by SIGKILL."""
    return trained_once(
        shared_bench,
        LANES,
        "benchmarks",
        *FEW_STEPS,
        "--llmbench-strategies=ddp,zero1,zero2,fsdp,zero2_offload",
        "--llmbench-world-sizes=1",
        "--llmbench-side-by-side=2",
        "-v",
        env={"LLMBENCH_INJECT_FAULT": "zero1:kill:0"},
    )


@pytest.mark.xdist_group(LANES)
def test_lanes_train_beside_each_other_and_what_loads_the_host_alone(shared_bench):
    bench, result = lanes_session(shared_bench)
    # a rank killed on a lane fails its own configuration, named, and nothing else
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*zero1 error*rank 0*"])
    runs = {r["strategy"]: r for r in saved_results(bench.path)}
    assert {r["status"] for r in runs.values()} == {"ok", "error"}
    on_lanes = [r for r in runs.values() if r["side_by_side"] and r["side_by_side"].get("lanes")]
    assert {r["strategy"] for r in on_lanes} == {"ddp", "zero1", "zero2", "fsdp"}
    assert {r["side_by_side"]["lane"] for r in on_lanes} == {1, 2}
    assert all(r["side_by_side"]["beside"] for r in on_lanes)  # each named what trained beside it
    # each lane keeps its own warm ranks: two groups at least, and some configuration reused one
    groups = {r["side_by_side"]["lane"]: set() for r in on_lanes}
    for r in on_lanes:
        groups[r["side_by_side"]["lane"]].add(r["timing"]["launch"]["group"])
    assert not groups[1] & groups[2]
    assert any(r["timing"]["launch"]["ranks"] == "warm" for r in on_lanes)
    offload = runs["zero2_offload"]
    assert offload["status"] == "ok" and "CPU offload" in offload["side_by_side"]["alone"]
    # each window says when it opened (time_to_answer.py counts overlapping windows once): the
    # one that ran alone opened after every lane's window had closed
    opened = {
        r["strategy"]: r["timing"]["window_started_at_unix"] for r in runs.values() if r["status"] == "ok"
    }
    assert all(isinstance(t, float) for t in opened.values())
    assert all(
        opened["zero2_offload"] >= opened[s] + runs[s]["timing"]["window_sec"]
        for s in opened
        if s != "zero2_offload"
    )
    # it came last, with the node to itself: it started after every lane's run had ended
    test_lines = [ln for ln in result.outlines if re.search(r"test_pretrain\[\w+-ws1.*(PASSED|FAILED)", ln)]
    assert "zero2_offload" in test_lines[-1]
    # the progress lines say which lane a configuration started on
    assert any(re.search(r"llmbench \[\d/5\] lane [12]/2 test_pretrain", ln) for ln in result.outlines)
    report = (bench.path / "results" / "latest").resolve()
    assert report.exists()


@pytest.mark.xdist_group(KILLED_FIRST)
def test_a_session_stopped_early_leaves_no_run_of_a_lane_marked_running(shared_bench):
    """-x after the first configuration fails: the one that ran ahead on the other lane keeps a
    truthful result.json (measured, or interrupted), never a run still "running"."""
    bench, result = trained_once(
        shared_bench,
        KILLED_FIRST,
        "benchmarks",
        *FEW_STEPS,
        "--llmbench-strategies=ddp,zero2,fsdp",
        "--llmbench-world-sizes=1",
        "--llmbench-side-by-side=2",
        "-x",
        env={"LLMBENCH_INJECT_FAULT": "ddp:kill:0"},
    )
    result.assert_outcomes(failed=1)
    statuses = {r["strategy"]: r["status"] for r in saved_results(bench.path)}
    assert statuses.pop("ddp") == "error"
    # the other lane took fsdp, the far end of the order, while ddp trained (and, on a slow machine,
    # zero2 after it): each measured or interrupted
    assert "fsdp" in statuses and set(statuses.values()) <= {"ok", "interrupted"}, statuses


def _both_lanes_training(proc: subprocess.Popen, root) -> list[psutil.Process]:
    """Until ddp (lane 1) and fsdp (lane 2, the far end) both train; the process tree then."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the session ended early"
        beats = [
            p for s in ("ddp", "fsdp") for p in root.glob(f"results/2*/*-{s}-ws1-*_results/rank0.progress")
        ]
        if len(beats) == 2 and all(
            '"warmup"' in p.read_text() or '"measuring"' in p.read_text() for p in beats
        ):
            return psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.3)
    pytest.fail("the lanes never both trained")


def test_an_interrupt_ends_every_lane_and_each_run_says_interrupted(bench):
    _interrupt_both_lanes(bench)


SLOW_WAKE = '''"""pytest's thread slow to run again once a forked agent's exit status has arrived (a loaded
machine), while the lane's thread may poll the same agent (tests/test_side_by_side.py)."""
import select as _select, threading, time, types
from pathlib import Path

from llmbench_pytest.launch import forkserver


def _select_slowly(r, w, x, timeout=None):
    ready = _select.select(r, w, x, timeout)
    if ready[0] and timeout != 0 and threading.current_thread() is threading.main_thread():
        Path("slow_wake").touch()
        time.sleep(0.2)
    return ready


forkserver.select = types.SimpleNamespace(select=_select_slowly)
'''


@pytest.mark.skipif(GPU_HOST, reason="a GPU host's agents are new processes, not the fork server's")
def test_an_interrupt_stays_one_when_pytests_thread_wakes_late_from_ending_a_lane(bench):
    """What failed `make test` once on a loaded 2-core machine, here made to happen every time:
    pytest's thread ends the lanes on the Ctrl-C and is slow to read an agent's exit status,
    which the lane's thread, polling the same agent meanwhile, reads first. Before, pytest's
    thread then got EBADF, which replaced the interrupt: "3 failed", an fsdp "-r2" re-run on a
    lane closed for good (PoolShut), and the other lane's fsdp left training."""
    (bench.path / "conftest.py").write_text(SLOW_WAKE)
    _interrupt_both_lanes(bench)
    assert (bench.path / "slow_wake").exists()  # the window was there


def _interrupt_both_lanes(bench: pytest.Pytester) -> None:
    env = {**os.environ, "LLMBENCH_INJECT_FAULT": "ddp:hang,fsdp:hang"}  # both lanes busy when we stop
    argv = [sys.executable, "-m", "pytest", "benchmarks", "-p", "no:cacheprovider", *FEW_STEPS]
    argv += ["--llmbench-strategies=ddp,zero2,fsdp", "--llmbench-world-sizes=1", "--llmbench-side-by-side=2"]
    log = bench.path / "session.log"
    with open(log, "wb") as out:  # SIGINT as a terminal gives it (a background job would ignore it)
        proc = subprocess.Popen(
            argv,
            cwd=bench.path,
            env=env,
            stdout=out,
            stderr=out,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 (no threads here)
        )
    try:
        tree = _both_lanes_training(proc, bench.path)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, text[-3000:]
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, f"left running: {[p.pid for p in alive]}\n{text[-3000:]}"
    statuses = {r["strategy"]: r["status"] for r in saved_results(bench.path)}
    # the one pytest waited for and the one ahead of it on the other lane: stopped, not crashed
    assert statuses == {"ddp": "interrupted", "fsdp": "interrupted"}, text[-3000:]


class _Pool:
    """A lane's pool that trains nothing: a job waits until the test releases it, or until the
    pool is closed under it (then it reports what a killed group reports)."""

    def __init__(self) -> None:
        self.current = threading.Event()
        self.status = "ok"
        self.closes: list[bool] = []
        self.at_once = False
        """a job returns ok at once"""

    def run(self, spec, launch, timeout_s, repo_dir, beat):
        self.current = threading.Event()
        self.status = "ok"
        beat({"phase": "warmup"})
        self.current.wait(0 if self.at_once else 10)
        return Measurement(status=self.status, error=None if self.status == "ok" else "killed")

    def close(self, graceful=True, final=False):
        self.closes.append(final)
        self.status = "error"
        self.current.set()

    def let_go(self):
        pass


def _lanes_on_fake_pools(plan, tmp_path, pool_class):
    """A SideBySide over `plan` whose lanes run on `pool_class` stand-ins (kept in the list returned
    beside it, in the order the lanes made them)."""
    from llmbench_pytest.results.storage import claim_run_paths
    from llmbench_pytest.session.side_by_side import SideBySide

    pools: list[_Pool] = []
    side = SideBySide(
        plan, "2", "cpu", [], [],
        new_pool=lambda env: pools.append(pool_class()) or pools[-1],
        prepare=lambda nodeid, s: (claim_run_paths(tmp_path, s), {}),
        free_node=lambda: None, timeout_s=60.0, repo_dir=".",
    )  # fmt: skip
    return side, pools


def test_a_timeout_while_waiting_ends_only_that_lane_and_its_run_trains_again_when_asked(tmp_path):
    plan = [("t[ddp]", spec()), ("t[fsdp]", spec(strategy="fsdp"))]
    side, pools = _lanes_on_fake_pools(plan, tmp_path, _Pool)

    def timed_out(event):  # what pytest-timeout's signal method raises inside the wait
        raise pytest.fail.Exception("Timeout")

    quiet = SimpleNamespace(config_began=lambda *a, **k: 0, config_ended=lambda *a, **k: None)
    progress = SimpleNamespace(**vars(quiet), on_progress=timed_out)
    job = side.begin("t[ddp]", plan[0][1], progress)
    ahead = side.jobs["t[fsdp]"]  # the other lane took it
    with pytest.raises(pytest.fail.Exception):
        side.wait(job, progress)
    assert job.stopped and job.done.is_set() and pools[0].closes == [False]
    assert not ahead.done.is_set() and not ahead.stopped and pools[1].closes == []  # the other lane goes on
    progress = SimpleNamespace(**vars(quiet), on_progress=lambda event: None)
    pools[1].current.set()
    assert side.wait(side.begin("t[fsdp]", plan[1][1], progress), progress).measurement.ok
    for pool in pools:
        pool.at_once = True
    again = side.begin("t[ddp]", plan[0][1], progress)  # stopped under another test: trains anew
    assert again is not job and not again.stopped
    assert side.wait(again, progress).measurement.ok
    side.close()
    assert all(p.closes[-1] for p in pools)  # closed for good: no group starts after


def test_a_pool_closed_for_good_starts_no_group(tmp_path):
    from llmbench_pytest.launch.launcher import Launch, PoolShut, RankPool

    pool = RankPool(tmp_path)
    pool.close(final=True)
    with pytest.raises(PoolShut):
        pool.run(spec(), Launch(tmp_path / "r", tmp_path / "r.log", 1), 60.0, ".")
    assert pool.group is None


def test_an_interrupt_stays_an_interrupt_whatever_ending_the_lanes_raises(tmp_path):
    """A Ctrl-C while a test waits for its lane ends every lane; where ending one raises (as a
    CPU agent's process did when the lane's thread read its exit status first: EBADF), the
    interrupt still ends the session, and nothing starts after it. Before, the error took the
    interrupt's place: the test failed, and pytest started the next configurations on lanes
    closed for good (PoolShut), an "-r2" re-run among them."""
    breaks = [OSError(9, "Bad file descriptor")]

    class _Breaks(_Pool):
        def close(self, graceful=True, final=False):
            super().close(graceful, final)
            if not graceful and breaks:  # the first lane's group, ended on the interrupt
                raise breaks.pop()

    plan = [("t[ddp]", spec()), ("t[zero2]", spec(strategy="zero2")), ("t[fsdp]", spec(strategy="fsdp"))]
    side, pools = _lanes_on_fake_pools(plan, tmp_path, _Breaks)

    def ctrl_c(event):
        raise KeyboardInterrupt

    quiet = SimpleNamespace(config_began=lambda *a, **k: 0, config_ended=lambda *a, **k: None)
    job = side.begin("t[ddp]", plan[0][1], SimpleNamespace(**vars(quiet), on_progress=lambda e: None))
    ahead = side.jobs["t[fsdp]"]
    with pytest.raises(KeyboardInterrupt):
        side.wait(job, SimpleNamespace(**vars(quiet), on_progress=ctrl_c))
    assert side.interrupted and job.stopped and ahead.stopped
    # pytest would stop here; where it went on regardless, nothing starts
    progress = SimpleNamespace(**vars(quiet), on_progress=lambda e: None)
    for nodeid, s in plan[1:]:
        with pytest.raises(KeyboardInterrupt):
            side.begin(nodeid, s, progress)
    assert set(side.jobs) == {"t[ddp]", "t[fsdp]"} and len(pools) == 2
    side.close(graceful=False)  # the session's end ends what the error left (state.shutdown)
    assert not side.runners and all(True in p.closes for p in pools)


def test_a_pool_is_never_polled_while_another_thread_ends_its_group(tmp_path, monkeypatch):
    """A lane's thread polls its group while pytest's thread ends it (an interrupt, a per-test
    timeout): the two must not wait on the group's process at once (a forked CPU agent is one
    socket with its exit status, which only one reader gets: the other got EBADF)."""
    from llmbench_pytest.launch import launcher

    touching: list[str] = []
    overlaps: list[tuple[str, str]] = []
    guard = threading.Lock()

    class _Group:
        def __init__(self, world_size, device, timeout_s, root, lane_env=None):
            self.key, self.name, self.leaving = (world_size, device, timeout_s), "g1-ws1", False
            self.proc = SimpleNamespace(returncode=None)
            self.polled = threading.Event()
            self.ended = False

        def _touch(self, what, seconds):
            with guard:
                overlaps.extend((other, what) for other in touching)
                touching.append(what)
            time.sleep(seconds)
            with guard:
                touching.remove(what)

        @property
        def alive(self):
            self._touch("poll", 0.01)
            self.polled.set()
            return not self.ended

        def end(self):
            self._touch("end", 0.3)
            self.ended, self.proc.returncode = True, -15

        def log_size(self):
            return 0

        def post(self, job):
            return 1

        def agent_output(self, since=0):
            return b""

        def remove(self):
            pass

    monkeypatch.setattr(launcher, "RankGroup", _Group)
    pool = launcher.RankPool(tmp_path)
    (tmp_path / "r").mkdir()
    launch = launcher.Launch(tmp_path / "r", tmp_path / "r.log", 1)
    got: list = []
    lane = threading.Thread(target=lambda: got.append(pool.run(spec(), launch, 60.0, ".")))
    lane.start()
    while pool.group is None and lane.is_alive():
        time.sleep(0.01)
    assert pool.group.polled.wait(10)  # the lane watches its group
    pool.close(graceful=False, final=True)  # pytest's thread, on a Ctrl-C
    lane.join(10)
    assert not lane.is_alive() and got and got[0].status == "error"
    assert not overlaps, overlaps
