"""--llmbench-find-batch: doubling, then bisecting; an out-of-memory trial is a data point."""

import json
import sys

import pytest

from conftest import FEW_STEPS, RUNS
from llmbench_pytest.launch.batch_search import Trial, search


def fake(limit, rate=lambda b: 100.0 * b):
    calls = []

    def try_batch(batch):
        calls.append(batch)
        if batch > limit:
            return Trial(batch, False, "oom")
        return Trial(batch, True, "ok", tokens_per_sec=rate(batch))

    return try_batch, calls


def test_doubles_then_bisects_to_the_largest_fit():
    try_batch, calls = fake(limit=11)
    result = search(try_batch, start=2, max_batch=64)
    assert calls == [2, 4, 8, 16, 12, 10, 11]
    assert result.max_fitting_batch == 11 and result.best_batch == 11 and not result.capped


def test_halves_when_the_start_does_not_fit():
    try_batch, calls = fake(limit=3)
    result = search(try_batch, start=16, max_batch=64)
    assert calls == [16, 8, 4, 2, 3]
    assert result.max_fitting_batch == 3


def test_fastest_is_not_always_the_largest():
    try_batch, _ = fake(limit=64, rate=lambda b: -((b - 8) ** 2) + 1000.0)
    result = search(try_batch, start=1, max_batch=32)
    assert result.best_batch == 8 and result.max_fitting_batch == 32 and result.capped


def test_nothing_fits():
    try_batch, _ = fake(limit=0)
    result = search(try_batch, start=4, max_batch=64)
    assert result.max_fitting_batch is None and result.best_batch is None


SEARCHED = "searched_session"


@pytest.fixture(scope="module")
def searched_session(shared_bench):
    """One in-process ddp session at tier A that searches the batch while batches above 4 raise a
    real torch.OutOfMemoryError inside the training step; then the report over it."""
    bench = shared_bench(SEARCHED)
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-strategies=ddp",
        "--llmbench-launch=inprocess",
        "--llmbench-find-batch",
        "--llmbench-batch=2",
        "--llmbench-max-batch=16",
        "--llmbench-tier=A",
        *FEW_STEPS,
        env={"LLMBENCH_INJECT_FAULT": "ddp:oom>4"},
    )
    report = bench.run(sys.executable, "-m", "llmbench_pytest.cli", "report", "results", "--no-plots", "-q")
    return bench, result, report


def the_run(bench) -> dict:
    (path,) = bench.path.glob(f"{RUNS}/*_results/result.json")
    return json.loads(path.read_text())


@pytest.mark.xdist_group(SEARCHED)
def test_search_recovers_from_real_out_of_memory_errors_in_the_session(searched_session):
    bench, result, report = searched_session
    result.assert_outcomes(passed=1)
    run = the_run(bench)
    found = run["batch_search"]
    assert found["max_fitting_batch"] == 4
    assert [(t["batch"], t["status"]) for t in found["trials"]] == [
        (2, "ok"),
        (4, "ok"),
        (5, "oom"),
        (6, "oom"),
        (8, "oom"),
    ]
    assert run["per_device_batch"] == found["best_batch"] and run["status"] == "ok"
    assert report.ret == 0, report.stderr.str()
    md = (bench.path / "results" / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "## Batch search" in md and "2, 4, 5 (oom), 6 (oom), 8 (oom)" in md
    assert "- batch search: ddp: fastest at batch" in md


@pytest.mark.xdist_group(SEARCHED)
def test_a_tier_sets_the_memory_limit(searched_session):
    # tier A allows 24 GB; a limit below the host memory the run uses fails the memory check
    bench, result, _ = searched_session
    result.assert_outcomes(passed=1)
    run = the_run(bench)
    memory = next(c for c in run["checks"] if c["name"] == "peak_memory")
    assert run["tier"] == "A" and memory["limit"] == 24.0 and memory["passed"] is True
