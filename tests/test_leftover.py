"""A warm rank is a fresh rank: what a run leaves behind after its teardown is measured, named,
recorded, and ends the warm group, so it never shows in the next configuration's figures.

The fault retain=MB makes a run's teardown keep a reference to MB megabytes of tensor in a module's
globals, as a forgotten cache would. Real torchrun groups on CPU, where the census of live tensors
stands in for the device's allocated memory.
"""

from __future__ import annotations

import pytest

from conftest import FEW_STEPS, runs_by_config


@pytest.mark.parametrize("retained_mb", [0, 100], ids=["healthy", "retained"])
def test_what_a_run_leaves_behind_is_named_and_ends_the_warm_group(bench, monkeypatch, retained_mb):
    if retained_mb:
        monkeypatch.setenv("LLMBENCH_INJECT_FAULT", f"ddp:retain={retained_mb}")
    # zero3 first when healthy: DeepSpeed's ZeRO-3 engine outlives destroy() (strategies/
    # deepspeed_zero._drop_storage), and a warm rank must still hand back everything it held
    strategies = "ddp,fsdp" if retained_mb else "zero3,ddp,fsdp"
    bench.runpytest_subprocess(
        "benchmarks", f"--llmbench-strategies={strategies}", "--llmbench-world-sizes=1", *FEW_STEPS
    ).assert_outcomes(passed=len(strategies.split(",")))
    runs = runs_by_config(bench.path)
    ddp, fsdp = runs["ddp-ws1"], runs["fsdp-ws1"]
    left = ddp["leftover_after_run"]
    assert left["limit_gb"] == pytest.approx(64 * 2**20 / 1e9)
    log = next(bench.path.glob("results/*-ddp-ws1-seq128_results")) / "rank0.log"
    if not retained_mb:
        # a healthy run hands everything back, and the next configuration runs on the same ranks
        for name, run in runs.items():
            assert run["leftover_after_run"]["within_limit"], (name, run["leftover_after_run"])
        assert ddp["timing"]["launch"]["ranks"] == fsdp["timing"]["launch"]["ranks"] == "warm"
        assert "behind after its teardown" not in log.read_text()
        return
    assert not left["within_limit"] and left["gb"] >= retained_mb * 2**20 / 1e9, left
    assert left["tensors"][0].startswith(f"Tensor {retained_mb * 2**20 // 4} float32, {retained_mb}.0 MiB")
    assert "globals of llmbench_pytest.worker.faults" in left["tensors"][0]
    assert ddp["per_rank"][0]["leftover_gb"] == left["gb"]
    assert "ddp left 100.0 MiB in tensors behind after its teardown" in log.read_text()
    # the figures stand (the run itself was healthy), but the next configuration gets fresh ranks
    assert ddp["status"] == "ok" and fsdp["status"] == "ok"
    assert fsdp["timing"]["launch"]["ranks"] == "fresh"
    assert fsdp["leftover_after_run"]["within_limit"]
