"""GPU-only behaviour. Each test skips, with the reason, where no CUDA GPU is visible; the arch-list
fix for DeepSpeed is plain text handling and runs everywhere."""

import json

import pytest

from conftest import LOOSE_CV
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
        LOOSE_CV,
        "--llmbench-strategies=ddp,zero2_offload",
        "--llmbench-world-sizes=1",
        "--llmbench-model=llama-tiny",
        "--llmbench-profile",
    )
    result.assert_outcomes(passed=2)
    runs = {}
    for path in bench.path.glob("results/*_results/result.json"):
        data = json.loads(path.read_text())
        runs[data["strategy"]] = data
        assert (path.parent / "rank0.pt.trace.json").exists()
    ddp = runs["ddp"]
    assert ddp["device"] == "cuda" and ddp["peak_vram_gb"] > 0
    assert abs(ddp["timing"]["events_vs_clock"]) < 0.02
    assert ddp["gpu_util_pct"] is not None and ddp["throttled"] is not None
    assert ddp["h2d_link_gbps"] > 1 and ddp["h2d_source"].startswith("torch.profiler")
    assert ddp["model_state_predicted_gb"] == pytest.approx(ddp["model_state_gb"], rel=0.1)
    # optimizer state in host memory: the profiler sees its traffic cross the link
    offload = runs["zero2_offload"]
    assert offload["h2d_gbps_per_gpu"] > ddp["h2d_gbps_per_gpu"]
    assert offload["model_state_host_gb"] > 0
