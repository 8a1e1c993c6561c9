"""The technique axes trained for real, as users run them on CPU: the chunked loss, emulated fp8
(FSDP2's fp8 all-gather and ZeRO-3 on two ranks), the SDPA flash backend, what cannot run here
skipped with the reason (by the plugin, or by the worker's own probe), the batch finder per
configuration, and the report's table of what each technique buys."""

import importlib.util

import pytest

from conftest import FEW_STEPS, saved_results

# found, not imported: the plugin's tests keep torch out of the process that drives pytest
needs_torchao = pytest.mark.skipif(
    importlib.util.find_spec("torchao") is None, reason="torchao is not installed: pip install torchao"
)


def by_axes(root):
    return {(r["strategy"], r["fused_loss"], r["fp8"], r["attention"]): r for r in saved_results(root)}


def test_axes_train_in_one_session_and_the_report_compares_them(bench):
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-fused-loss=none,chunked,liger",
        "--llmbench-attention=default,flash",
        "--llmbench-profile",  # on CPU the profiled steps name the attention kernels
        *FEW_STEPS,
        "--llmbench-report",
        "-v",
        "-rs",
    )
    result.assert_outcomes(passed=4, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*test_pretrain?ddp-ws1-seq128-llama-tiny-loss_chunked-attn_flash? PASSED*",
            "*SKIPPED*liger-kernel runs Triton kernels: needs a CUDA GPU (this session trains on CPU)*",
        ]
    )
    runs = by_axes(bench.path)
    assert set(runs) == {
        ("ddp", loss, "none", attn) for loss in ("none", "chunked") for attn in ("default", "flash")
    }
    plain, chunked = runs["ddp", "none", "none", "default"], runs["ddp", "chunked", "none", "default"]
    # the first step sees the same weights and batch: the fused loss is the model's loss
    assert chunked["warmup_losses"][0] == pytest.approx(plain["warmup_losses"][0], abs=1e-5)
    assert chunked["techniques"]["fused_loss"] == {"kind": "chunked", "chunk_rows": 8192, "compiled": False}
    assert chunked["last_loss"] < chunked["first_loss"]
    flash = runs["ddp", "none", "none", "flash"]
    assert (
        flash["attention_ran"] == "flash"
        and flash["techniques"]["attention"]["sdpa_backend"] == "FLASH_ATTENTION"
    )
    session = bench.path / "results" / "latest"
    assert any(p.name.endswith("-loss_chunked-attn_flash_results") for p in session.iterdir())
    md = (bench.path / "results" / "latest" / "summary" / "BENCHMARK_REPORT.md").read_text()
    section = md[md.index("## What each technique buys") :]
    assert "| fused loss chunked " in section and "| attention flash (ran flash) " in section
    header = (bench.path / "results" / "latest" / "summary" / "metrics.csv").read_text().splitlines()[0]
    assert header.endswith(
        "fused_loss,fp8,attention,attention_ran,mfu_note,mfu_vs_fp8_peak,fp8_layers,fused_loss_chunk_rows,"
        "peak_predicted_gb,peak_reserved_predicted_gb,peak_prediction_gap"
    )


@needs_torchao
def test_fp8_and_the_chunked_loss_train_sharded_on_two_ranks(bench):
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-strategies=fsdp,zero3",
        "--llmbench-world-sizes=2",
        "--llmbench-fp8=tensorwise",
        "--llmbench-fused-loss=chunked",
        *FEW_STEPS,
        "-v",
    )
    result.assert_outcomes(passed=2)
    runs = by_axes(bench.path)
    fsdp, zero3 = (
        runs["fsdp", "chunked", "tensorwise", "default"],
        runs["zero3", "chunked", "tensorwise", "default"],
    )
    # FSDP2 all-gathers the fp8 weights and precomputes their scales after each step; ZeRO-3
    # gathers lm_head for the chunked loss through the head's own forward
    assert fsdp["techniques"]["fp8"] == {
        "recipe": "tensorwise",
        "layers": 28,
        "kept_16bit": ["lm_head"],
        "emulated": True,
        "fsdp_float8_all_gather": True,
    }
    assert zero3["techniques"]["fp8"]["fsdp_float8_all_gather"] is False
    for run in (fsdp, zero3):
        assert run["status"] == "ok" and run["world_size"] == 2 and run["last_loss"] < run["first_loss"]


@needs_torchao
def test_what_only_the_worker_can_tell_is_skipped_with_its_reason(bench):
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-fp8=tensorwise",
        # widths no fp8 GEMM takes (multiples of 16 only): nothing to convert
        "--llmbench-model-config=hidden_size=40,intermediate_size=100",
        "-rs",
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*ddp: rank 0: no linear layer of llama-tiny can take fp8 GEMMs*"])
    (run,) = saved_results(bench.path)
    assert run["status"] == "unavailable" and run["fp8"] == "tensorwise"


def test_the_batch_finder_searches_each_configuration_of_an_axis(bench, monkeypatch):
    # batches above 2 run out of memory: each configuration tries 2 (fits), doubles to 4 (out of
    # memory) and bisects to 3 (out of memory); test_batch_search.py follows a longer search
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:oom>2")
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-fused-loss=none,chunked",
        "--llmbench-find-batch",
        "--llmbench-batch=2",
        "--llmbench-max-batch=4",
        *FEW_STEPS,  # the trials measure their own few steps; this is the run at the batch found
    )
    result.assert_outcomes(passed=2)
    runs = by_axes(bench.path)
    for loss in ("none", "chunked"):
        run = runs["ddp", loss, "none", "default"]
        found = run["batch_search"]
        assert [(t["batch"], t["status"]) for t in found["trials"]] == [(2, "ok"), (3, "oom"), (4, "oom")]
        assert found["max_fitting_batch"] == 2
        assert run["per_device_batch"] == found["best_batch"]
    # each trial is named by its spec: the chunked configuration's trials trained the chunked loss
    trials = sorted(p.name for p in bench.path.glob("results/latest/.batch-search/*.log"))
    assert sum("-loss_chunked" in name for name in trials) == 3 and len(trials) == 6


def test_a_bad_axis_value_is_one_clear_error(bench):
    result = bench.runpytest_subprocess("benchmarks", "--llmbench-fused-loss=none,ligr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmbench-fused-loss: must be one of none, chunked, liger; got 'ligr'*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
