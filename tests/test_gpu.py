"""GPU-only behaviour. Each test skips, with the reason, where no CUDA GPU is visible; the arch-list
fix for DeepSpeed is plain text handling and runs everywhere."""

import json
import time

import pytest

from conftest import RUNS, runs_by_config
from llmbench_pytest.worker.strategies.deepspeed_zero import deepspeed_safe_arch_list

torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible)")


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("9.0a", "9.0"),
        ("8.0;9.0a+PTX", "8.0;9.0+PTX"),
        ("9.0a 10.0f", "9.0;10.0"),
        ("8.6", "8.6"),
        (None, None),
    ],
)
def test_arch_suffixes_deepspeed_rejects_are_dropped(given, used):
    assert deepspeed_safe_arch_list(given) == used


@needs_gpu
@pytest.mark.own_process_on_gpu
def test_nvml_monitor_and_link_probe():
    from llmbench_pytest.worker.monitor import GpuMonitor
    from llmbench_pytest.worker.probes import h2d_link_gbps

    device = torch.device("cuda", 0)
    monitor = GpuMonitor(device, interval_s=0.05)
    monitor.start()
    a = torch.randn(4096, 4096, device=device)
    for _ in range(50):
        a = a @ a / 64
    torch.cuda.synchronize()
    summary = monitor.stop()
    assert summary is not None, monitor.error
    assert summary["samples"] >= 1 and summary["power_w_mean"] > 0 and summary["sm_clock_mhz_mean"] > 0
    assert 1 < h2d_link_gbps(device) < 1000


@needs_gpu
def test_gpu_run_measures_communication_memory_and_the_gpu(bench):
    result = bench.runpytest_subprocess(
        "benchmarks",
        "--llmbench-strategies=ddp,zero2_offload",
        "--llmbench-world-sizes=1",
        "--llmbench-model=llama-tiny",
        "--llmbench-profile",
    )
    result.assert_outcomes(passed=2)
    runs = {}
    for path in bench.path.glob(f"{RUNS}/*_results/result.json"):
        data = json.loads(path.read_text())
        runs[data["strategy"]] = data
        assert (path.parent / "rank0.pt.trace.json").exists()
    ddp = runs["ddp"]
    assert ddp["device"] == "cuda" and ddp["peak_vram_gb"] > 0
    # the CUDA events agree with the host clock within 2%, or the difference is the loop's own work
    # between steps (the timing_agreement check): a tiny model's 16 ms steps leave the GPU idle
    # while the host starts the next, which the events do not see (-2.0% and -2.2% on 1x H100)
    agreement = {c["name"]: c for c in ddp["checks"]}["timing_agreement"]
    assert agreement["passed"] is True, agreement["message"]
    assert abs(ddp["timing"]["events_vs_clock"]) < 0.05, agreement["message"]
    assert ddp["gpu_util_pct"] is not None and ddp["throttled"] is not None
    assert ddp["h2d_link_gbps"] > 1 and ddp["h2d_source"].startswith("torch.profiler")
    assert ddp["model_state_predicted_gb"] == pytest.approx(ddp["model_state_gb"], rel=0.1)
    # optimizer state in host memory: the profiler sees its traffic cross the link
    offload = runs["zero2_offload"]
    assert offload["h2d_gbps_per_gpu"] > ddp["h2d_gbps_per_gpu"]
    assert offload["model_state_host_gb"] > 0


needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"
)


def _checks(bench, name, ws):
    return {c["name"]: c for c in runs_by_config(bench.path)[f"{name}-ws{ws}"]["checks"]}


@needs_gpu
def test_an_erratic_ranks_window_ends_at_its_budget_with_no_verdict_and_a_steady_one_passes(
    bench, monkeypatch
):
    # every optimizer step of zero2 sleeps 0 to 1 s first: past the cap of 10 steps it is measured
    # until the 20 s budget is spent, and its mean is still not known to 10%: the budget, not the
    # strategy, ended the window, so no verdict (issue 41; a fixed count that ends it imprecise is
    # failed: tests/test_timing_verdicts.py). ddp's 16 ms steps go on past the cap until theirs is
    # known (at a fixed 10 steps a healthy tiny ddp on 1x H100 was known to +-96.8% on 2026-11-26:
    # two effective steps of 16 ms). Written for the budget rule on 2026-11-27, not yet run on a GPU.
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "zero2:jitter=1.0")
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-strategies=ddp,zero2",
        "--llmbench-world-sizes=1",
        "--llmbench-model=llama-tiny",
        "--llmbench-max-steps=10",
    )
    result.assert_outcomes(passed=2)
    erratic = _checks(bench, "zero2", 1)["mean_interval"]
    assert erratic["passed"] is None and erratic["measured"] > 0.10
    assert "the budget, not the strategy, ended the window" in erratic["message"]
    assert _checks(bench, "ddp", 1)["mean_interval"]["passed"] is True


@needs_two_gpus
def test_a_slow_rank_fails_scaling_and_healthy_ranks_pass(bench, monkeypatch):
    # rank 1 of zero2's two-GPU run sleeps 0.5 s before every optimizer step
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "zero2:slow=0.5:1")
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-strategies=ddp,zero2",
        "--llmbench-world-sizes=1,2",
        "--llmbench-model=llama-tiny",
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*- scaling: zero2: scales poorly: weak scaling: 2 GPUs * < 60%*"])
    assert _checks(bench, "ddp", 2)["scaling"]["passed"] is True


@needs_two_gpus
def test_a_zero2_that_keeps_full_gradients_on_gpus(bench, monkeypatch):
    # DeepSpeed runs "zero2" at stage 1. With overlap_comm (the GPU config) ZeRO-1 reduces while
    # backward runs, but keeps every gradient larger than a bucket whole until after it
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "zero2:stage=1")
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-strategies=zero2",
        "--llmbench-world-sizes=2",
        "--llmbench-model=llama-tiny",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- model_states: zero2: model states per rank at world size 2*beyond 5%*"])


@needs_gpu
def test_a_slow_fault_stalls_the_gpu_not_only_the_host(monkeypatch):
    """LLMBENCH_INJECT_FAULT's slow= stands for a slower GPU: the step must end SECONDS later. A sleep
    on the host while the device still works through the queued step is hidden (a 10% slow ddp on
    1x H200 measured no slower, docs/results/2026-11-29-h200-gate-live); the fault waits for the
    device first."""
    from types import SimpleNamespace

    from llmbench_pytest.worker import faults

    delay = 0.05
    monkeypatch.setenv(faults.ENV, f"ddp:slow={delay}")
    faults.maybe_inject(SimpleNamespace(name="ddp", seed=0, per_device_batch=1), 0)
    p = torch.nn.Parameter(torch.zeros(1, device="cuda"))
    opt = torch.optim.SGD([p], lr=0.1)
    a = torch.randn(8192, 8192, device="cuda")

    def queued_work(step: bool) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):  # far longer on any GPU than the delay: a hidden sleep would vanish
            a @ a
        if step:
            p.grad = torch.zeros_like(p)
            opt.step()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    try:
        queued_work(step=False)  # cuBLAS's first call
        alone = min(queued_work(step=False) for _ in range(3))
        slowed = min(queued_work(step=True) for _ in range(3))
    finally:
        monkeypatch.delenv(faults.ENV)
        faults.maybe_inject(SimpleNamespace(name="ddp", seed=0, per_device_batch=1), 0)  # hook off
    assert alone > 2 * delay
    assert slowed - alone > 0.8 * delay, f"queued work {alone:.3f} s alone, {slowed:.3f} s with the fault"
