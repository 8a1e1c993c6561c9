"""A warm rank is a fresh rank: what a run leaves behind after its teardown is measured, named,
recorded, and ends the warm group, so it never shows in the next configuration's figures.

The fault retain=MB makes a run's teardown keep a reference to MB megabytes of tensor in a module's
globals, as a forgotten cache would. Real torchrun groups on CPU, where the census of live tensors
stands in for the device's allocated memory.
"""

from __future__ import annotations

import pytest

from conftest import FEW_STEPS, RUNS, SharedBench, runs_by_config, trained_once

HANDED_BACK = "handed_back_session"
HANDED_BACK_STRATEGIES = ("fsdp_grad_op", "zero3", "ddp", "fsdp", "zero1", "zero2", "zero0")
RETAINED_MB = 100


def handed_back_session(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    """One launcher session at world size 1, trained once per test process, for the tests marked
    xdist_group(HANDED_BACK), here and in test_warm_ranks.py. Four groups, one after the other:
    fsdp_grad_op alone (its teardown raises, which ends its group); zero3, ddp, fsdp and zero1 (the
    first three healthy, zero1 keeping RETAINED_MB past its teardown, which ends that group); zero2
    (leaving a process-wide torch setting changed, which ends its group); zero0."""
    return trained_once(
        shared_bench,
        HANDED_BACK,
        "benchmarks",
        f"--llmbench-strategies={','.join(HANDED_BACK_STRATEGIES)}",
        "--llmbench-world-sizes=1",
        *FEW_STEPS,
        "-v",
        env={"LLMBENCH_INJECT_FAULT": f"fsdp_grad_op:teardown,zero1:retain={RETAINED_MB},zero2:setting"},
    )


@pytest.fixture
def handed_back(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    return handed_back_session(shared_bench)


@pytest.mark.xdist_group(HANDED_BACK)
@pytest.mark.parametrize("retained_mb", [0, RETAINED_MB], ids=["healthy", "retained"])
def test_what_a_run_leaves_behind_is_named_and_ends_the_warm_group(handed_back, retained_mb):
    bench, result = handed_back
    result.assert_outcomes(passed=6, failed=1)  # the failure: fsdp_grad_op's teardown
    runs = runs_by_config(bench.path)
    assert set(runs) == {f"{s}-ws1" for s in HANDED_BACK_STRATEGIES}
    # healthy: zero3, ddp and fsdp, zero3 first in its group: DeepSpeed's ZeRO-3 engine outlives
    # destroy() (strategies/deepspeed_zero._drop_storage), and a warm rank must still hand back
    # everything it held. Retained: zero1, the last of that group, and zero2 after it
    name, next_name = ("ddp", "fsdp") if not retained_mb else ("zero1", "zero2")
    run, after = runs[f"{name}-ws1"], runs[f"{next_name}-ws1"]
    left = run["leftover_after_run"]
    assert left["limit_gb"] == pytest.approx(64 * 2**20 / 1e9)
    log = next(bench.path.glob(f"{RUNS}/*-{name}-ws1-seq128_results")) / "rank0.log"
    if not retained_mb:
        # a healthy run hands everything back, and the next configuration runs on the same ranks
        for config, healthy in runs.items():
            if config not in ("fsdp_grad_op-ws1", "zero1-ws1"):  # the two faulty ones
                assert healthy["leftover_after_run"]["within_limit"], (config, healthy["leftover_after_run"])
        assert runs["zero3-ws1"]["timing"]["launch"]["ranks"] == "fresh"
        assert run["timing"]["launch"]["ranks"] == after["timing"]["launch"]["ranks"] == "warm"
        assert "behind after its teardown" not in log.read_text()
        return
    assert not left["within_limit"] and left["gb"] >= retained_mb * 2**20 / 1e9, left
    assert left["tensors"][0].startswith(f"Tensor {retained_mb * 2**20 // 4} float32, {retained_mb}.0 MiB")
    assert "globals of llmbench_pytest.worker.faults" in left["tensors"][0]
    assert run["per_rank"][0]["leftover_gb"] == left["gb"]
    assert "zero1 left 100.0 MiB in tensors behind after its teardown" in log.read_text()
    # the figures stand (the run itself was healthy), but the next configuration gets fresh ranks
    assert run["status"] == "ok" and after["status"] == "ok"
    assert run["timing"]["launch"]["ranks"] == "warm"
    assert after["timing"]["launch"]["ranks"] == "fresh"
    assert after["leftover_after_run"]["within_limit"]


@pytest.mark.xdist_group(HANDED_BACK)
def test_a_process_wide_setting_left_changed_is_named_and_ends_the_warm_group(handed_back):
    bench, _ = handed_back
    runs = runs_by_config(bench.path)
    run, after = runs["zero2-ws1"], runs["zero0-ws1"]
    flipped = {"setting": "float32 matmul precision", "fresh": "highest", "left": "medium"}
    assert run["leftover_after_run"]["settings"] == [flipped]
    log = (next(bench.path.glob(f"{RUNS}/*-zero2-ws1-seq128_results")) / "rank0.log").read_text()
    assert (
        "zero2 left torch's process-wide settings changed (float32 matmul precision: highest before "
        "the first run, medium now)" in log
    )
    # the run's own figures stand; the next configuration starts where the switch is as it was
    assert run["status"] == "ok" and after["status"] == "ok"
    assert after["timing"]["launch"]["ranks"] == "fresh"
    # every other run left the switches as it found them (zero3, ddp and fsdp on warm ranks);
    # fsdp_grad_op's failed teardown left nothing measured
    for config in ("zero3-ws1", "ddp-ws1", "fsdp-ws1", "zero1-ws1", "zero0-ws1"):
        left = runs[config]["leftover_after_run"]
        assert left["settings"] == [], (config, left)
    # ZeRO-3 ran with DeepSpeed's own linear, as DeepSpeed means it to, and handed torch's back:
    # DeepSpeed leaves it replaced for the whole process, which the check above would name
    replaced = runs["zero3-ws1"]["strategy_config"]["replaced_for_this_run"]
    assert replaced["torch.nn.functional.linear"] == "deepspeed.runtime.zero.linear.zero3_linear_wrap"
    assert runs["ddp-ws1"]["timing"]["launch"]["ranks"] == "warm"


def test_a_replaced_torch_function_is_named_with_what_replaced_it():
    """The comparison behind the check above, in this process: a library that swaps one of torch's
    functions for the whole process (as DeepSpeed's ZeRO-3 does with functional.linear) is named,
    and putting it back clears it."""
    from torch.nn import functional

    from llmbench_pytest.worker import process_settings

    fresh = process_settings.snapshot()
    original = functional.gelu

    def gelu_of_some_library(*args, **kwargs):
        return original(*args, **kwargs)

    functional.gelu = gelu_of_some_library
    try:
        (left,) = process_settings.changed(fresh)
    finally:
        functional.gelu = original
    assert left == {
        "setting": "torch.nn.functional.gelu",
        "fresh": "torch._C._nn.gelu",
        "left": f"{__name__}.{gelu_of_some_library.__qualname__}",
    }
    assert process_settings.changed(fresh) == []
