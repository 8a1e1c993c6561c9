"""Hands a run's measured step times to pytest-benchmark, so its storage and tools work.

pytest-benchmark times a callable itself; llmbench's steps are timed inside the training loop
(CUDA events, slowest rank), so the measured times are fed into the fixture's Stats directly.
That uses BenchmarkFixture._make_stats, the same entry its own pedantic mode uses; the version
range in pyproject.toml pins the 5.x API, and tests/test_benchmark_storage.py proves the saved
runs load in `pytest-benchmark compare`.
"""

from __future__ import annotations

from typing import Any

EXTRA_KEYS = (
    "strategy",
    "model",
    "world_size",
    "seq_len",
    "per_device_batch",
    "grad_accum",
    "dtype",
    "grad_ckpt",
    "device",
    "gpu_name",
    "tokens_per_sec",
    "samples_per_sec",
    "mean_step_time_sec",
    "step_cv_in_run",
    "step_time_std_sec",
    "peak_vram_gb",
    "peak_reserved_gb",
    "peak_host_rss_gb",
    "model_state_gb",
    "h2d_gbps_per_gpu",
    "tflops_per_gpu",
    "mfu",
    "mean_loss",
    "first_loss",
    "last_loss",
    "status",
    "repeats",
    # a session's own noise, the floor under the spread between sessions (analysis/decision.py),
    # comes from these per-step times (pytest-benchmark keeps its own copy only with
    # --benchmark-save-data)
    "step_times_sec",
    "node_shared",
    "side_by_side",
    # the technique and settings axes: the gate keys a saved run's configurations by them
    # (report/records.py)
    "fused_loss",
    "fp8",
    "attention",
    "settings_variant",
)


def record(benchmark: Any, result: dict[str, Any], result_path: str | None) -> None:
    """Fill the benchmark fixture from a result document (every rank; only rank 0 saves)."""
    benchmark.group = (
        f"{result['model']} seq{result['seq_len']} ws{result['world_size']} "
        f"b{result['per_device_batch']}x{result['grad_accum']} {result['dtype']}"
    )
    benchmark.params = {k: result[k] for k in ("strategy", "world_size", "seq_len", "model")}
    benchmark.extra_info.update({k: result.get(k) for k in EXTRA_KEYS})
    benchmark.extra_info["result_json"] = result_path
    benchmark._mode = "llmbench.train()"  # marks the fixture used (no "not used" warning)
    if result.get("status") != "ok":
        benchmark.has_error = True  # pytest-benchmark leaves errored benchmarks out of its files
        return
    if benchmark.disabled:  # --benchmark-disable: train and check, but record nothing
        return
    stats = benchmark._make_stats(1)
    for seconds in result["step_times_sec"]:
        stats.update(seconds)
