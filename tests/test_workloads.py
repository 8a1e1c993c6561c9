"""LoRA fine-tuning and seed 001's diagnostic matrix, trained for real at CPU size."""

import sys

import pytest

from conftest import FEW_STEPS, REPO, saved_results

LORA = "lora_session"


@pytest.fixture(scope="module")
def lora_session(shared_bench):
    """One session trains both LoRA benchmarks: the fine-tuning at ddp and zero3 (`-k` leaves out
    its marker's fsdp and zero2) and the diagnostic matrix (its marker: ddp), then the report."""
    bench = shared_bench(LORA)
    for name in ("test_finetune_lora.py", "test_lora_diagnostic.py"):
        (bench.path / "benchmarks" / name).write_text((REPO / "benchmarks" / name).read_text())
    result = bench.runpytest_subprocess(
        "benchmarks/test_finetune_lora.py",
        "benchmarks/test_lora_diagnostic.py",
        "-k",
        "ddp or zero3",
        "--llmbench-launch=inprocess",
        "--llmbench-lora-rank=8",
        "--llmbench-price=0.60",
        *FEW_STEPS,
        "-v",
        "-rs",
    )
    report = bench.run(sys.executable, "-m", "llmbench_pytest.cli", "report", "results", "--no-plots", "-q")
    return bench, result, report


@pytest.mark.xdist_group(LORA)
def test_lora_trains_only_the_adapters_and_prices_the_samples(lora_session):
    bench, result, _ = lora_session
    result.assert_outcomes(passed=7, skipped=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_finetune_lora?zero3-ws1-seq128-mistral-tiny? PASSED*"])
    runs = [run for run in saved_results(bench.path) if run["diagnostic"] is None]
    assert sorted(run["strategy"] for run in runs) == ["ddp", "zero3"]
    for run in runs:
        assert run["workload"] == "lora" and run["model"] == "mistral-tiny" and run["lora_rank"] == 8
        assert 0 < run["trainable_params"] < run["params"] / 20  # adapters only
        assert run["last_loss"] < run["first_loss"]
        # seed 001: cost per 1K samples = $/GPU-hour x GPUs / 3600 / samples per second x 1000
        assert run["cost_per_1k_samples_usd"] == pytest.approx(0.60 / 3600 / run["samples_per_sec"] * 1000)
        assert abs(run["model_state_gap"]) < 0.25, run["strategy"]


@pytest.mark.xdist_group(LORA)
def test_diagnostic_matrix_runs_every_variant_it_can(lora_session):
    bench, result, report = lora_session
    # no GPU here: the paged 8-bit optimizer variant is skipped with its reason
    result.assert_outcomes(passed=7, skipped=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_lora_diagnostic?ddp-ws1-seq128-mistral-tiny-fp16? PASSED*"])
    result.stdout.fnmatch_lines(["*SKIPPED*paged_adamw_8bit (bitsandbytes)*needs a GPU*"])
    found = {run["diagnostic"]: run for run in saved_results(bench.path) if run["diagnostic"]}
    assert set(found) == {"baseline", "lora_rank", "shorter_seq", "shorter_seq_larger_batch", "fp16"}
    base = found["baseline"]
    assert found["lora_rank"]["lora_rank"] == base["lora_rank"] // 2
    assert found["shorter_seq"]["seq_len"] == base["seq_len"] // 2
    assert found["shorter_seq_larger_batch"]["per_device_batch"] == 2 * base["per_device_batch"]
    assert found["fp16"]["dtype"] == "fp16"

    # the report shows each variant's speed-up over the baseline and what worked
    assert report.ret == 0, report.stderr.str()
    md = (bench.path / "results" / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "## Diagnostic matrix (LoRA fine-tuning)" in md and "| what worked | what did not |" in md
    assert "shorter_seq_larger_batch | seq 128 -> 64, batch 4 -> 8 |" in md.replace("  ", " ")
