"""pytest-xdist: `pytest benchmarks/ -n N` spreads configurations over workers that each own a
disjoint slice of the node's devices; the controller reports, gates and saves once for all."""

from __future__ import annotations

import csv
import functools
import json
import os
from datetime import datetime

import pytest

from conftest import RUNS, saved_results
from llmbench_pytest.config import hardware, host_share
from llmbench_pytest.config.hardware import Hardware, NodeShare
from llmbench_pytest.launch.matrix import _too_big


@pytest.fixture
def gpu_node(monkeypatch):
    """share_node on a node of 8 GPUs (the slicing is arithmetic; no GPU needed to check it)."""
    node = Hardware(device="cuda", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=8, device_gib=79.2, bf16=True)
    monkeypatch.setattr(hardware, "detect", functools.cache(lambda *args: hardware._share or node))
    monkeypatch.setattr(hardware, "_share", None)
    # set first, so that undo restores the variable share_node writes even where it was unset
    # (delenv of an unset variable records nothing, and "" then hid the GPUs from later tests)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    cores = os.sched_getaffinity(0)
    yield node
    os.sched_setaffinity(0, cores)  # share_node pins a GPU worker to its share of the cores too


@pytest.mark.parametrize(
    ("worker", "workers", "visible", "owns"),
    [
        ("gw0", 8, None, "0"),
        ("gw3", 4, None, "6,7"),
        ("gw1", 3, None, "2,3"),  # 8 // 3 = 2 each; GPUs 6 and 7 stay idle
        ("gw1", 2, "2,3,4,5", "4,5"),  # a slice of what the user made visible
        ("gw9", 16, None, ""),  # more workers than GPUs: this one owns none
    ],
)
def test_each_worker_owns_a_contiguous_disjoint_slice_of_the_gpus(
    gpu_node, monkeypatch, worker, workers, visible, owns
):
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    cores = sorted(os.sched_getaffinity(0))
    hw = hardware.share_node(worker, workers)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == owns
    # and its share of the host's cores, which its ranks divide (offload's CPU optimizer)
    index = int(worker.removeprefix("gw")) % workers
    assert sorted(os.sched_getaffinity(0)) == host_share.slice_for(cores, workers, index)
    assert hw.device == "cuda" and hw.gpu_count == len(owns.split(",") if owns else [])
    assert hw.share is not None and hw.share.to_dict() == {
        "worker": worker,
        "workers": workers,
        "device": "cuda",
        "devices": owns.split(",") if owns else [],
        "node_devices": 8 if visible is None else 4,
    }
    assert hardware.detect() is hw  # from now on this process sees its slice


def test_a_world_size_larger_than_a_workers_slice_is_skipped_naming_the_fix():
    share = NodeShare("gw0", 0, 8, "cuda", ("0",), 8)
    hw = Hardware(device="cuda", gpu_count=1, share=share)
    assert _too_big(1, hw) is None
    assert _too_big(2, hw) == (
        "world size 2 needs 2 GPUs (one per rank); each of the 8 pytest-xdist workers owns 1 of this "
        "machine's 8: run with fewer workers, e.g. -n 4"
    )
    assert _too_big(8, hw).endswith("owns 1 of this machine's 8: run it without -n")
    assert _too_big(16, hw) == "world size 16 needs 16 GPUs (one per rank); this machine has 8"


def test_n_auto_is_one_worker_per_gpu(gpu_node, pytester):
    from llmbench_pytest import plugin

    assert plugin.pytest_xdist_auto_num_workers(pytester.parseconfig()) == 8


def test_n_auto_starts_one_worker_per_core_on_cpu(pytester):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    cores = len(os.sched_getaffinity(0))
    result = pytester.runpytest_subprocess("-n", "auto")
    result.stdout.fnmatch_lines([f"created: {cores}/{cores} workers"])
    result.assert_outcomes(passed=1)


def _interval(result: dict) -> tuple[datetime, datetime]:
    meta = result["metadata"]
    return datetime.fromisoformat(meta["started_at"]), datetime.fromisoformat(meta["finished_at"])


TWO_CORES = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="two xdist workers need two CPU cores"
)


@TWO_CORES
def test_under_xdist_a_world_size_too_big_for_a_workers_share_is_skipped_end_to_end(bench):
    result = bench.runpytest_subprocess(
        "benchmarks", "-n", "2", "--llmbench-world-sizes=2", "--llmbench-strategies=ddp,zero2", "-rs"
    )
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]2[]] *: world size 2 needs 2 CPU cores (one per rank); each of the 2 pytest-xdist "
            "workers owns 1 of this machine's *: run it without -n"
        ]
    )


@TWO_CORES
def test_two_workers_share_the_node_and_the_controller_reports_once(bench, monkeypatch):
    # Two items: xdist hands them out one per worker (with four or more it sends consecutive
    # chunks, and the matrix is world-size-major, so both world-size-1 runs would go to gw0).
    # Each measured step sleeps 0.5 s: the two runs overlap by seconds, which their metadata's
    # whole-second times tell apart even when one worker starts a second late.
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:slow=0.5,zero2:slow=0.5")
    result = bench.runpytest_subprocess(
        "benchmarks",
        "-n",
        "2",
        "--llmbench-world-sizes=1",
        "--llmbench-strategies=ddp,zero2",
        "--llmbench-steps=3",
        "--llmbench-warmup=1",
        "--llmbench-report",
        "--benchmark-autosave",
        "-rs",
    )
    result.assert_outcomes(passed=2)
    # the controller's progress lines name the worker, k/N and the ETA
    result.stdout.fnmatch_lines(
        ["llmbench [[]?/2[]] gw? test_pretrain[[]*-ws1-seq128-llama-tiny[]] started *ETA *"]
    )
    runs = {r["strategy"]: r for r in saved_results(bench.path)}
    assert set(runs) == {"ddp", "zero2"}
    shares = [runs[s]["node_shared"] for s in ("ddp", "zero2")]
    assert {s["worker"] for s in shares} == {"gw0", "gw1"}
    assert all(s["workers"] == 2 and s["device"] == "cpu" and len(s["devices"]) == 1 for s in shares)
    assert shares[0]["devices"] != shares[1]["devices"]  # disjoint cores
    # one session as the user started it: both workers name it alike, so a report reads their
    # runs together and never takes an earlier session's runs for repeats of these
    sessions = {runs[s]["metadata"]["session"] for s in ("ddp", "zero2")}
    assert len(sessions) == 1 and len(sessions.pop()) == 8
    (start_a, end_a), (start_b, end_b) = (_interval(runs[s]) for s in ("ddp", "zero2"))
    assert max(start_a, start_b) < min(end_a, end_b), "the two configurations did not run at once"
    # one report, over both workers' runs
    # ... in one folder: the workers write into their controller's session folder
    (folder,) = bench.path.glob(f"{RUNS}/")
    assert (bench.path / "results" / "latest").resolve() == folder.resolve()
    assert len(list(folder.glob("*_results/result.json"))) == 2
    with open(folder / "summary" / "metrics.csv") as fh:
        assert sorted(row["strategy"] for row in csv.DictReader(fh)) == ["ddp", "zero2"]
    result.stdout.fnmatch_lines(["report: *BENCHMARK_REPORT.md"])
    # one pytest-benchmark run, saved by the controller, with both workers' step times
    saved = list((bench.path / ".benchmarks").glob("*/0001_*.json"))
    assert len(saved) == 1 and not list((bench.path / ".benchmarks").glob("*/0002_*.json"))
    benchmarks = json.loads(saved[0].read_text())["benchmarks"]
    assert sorted(b["params"]["strategy"] for b in benchmarks) == ["ddp", "zero2"]
    assert all(
        b["stats"]["rounds"] == 3 and b["extra_info"]["node_shared"]["workers"] == 2 for b in benchmarks
    )
    assert "Benchmarks are automatically disabled" not in result.stdout.str() + result.stderr.str()
