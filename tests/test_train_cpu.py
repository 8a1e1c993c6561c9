"""Every strategy trains for real in one process (a one-rank gloo group), as `pytest benchmarks/`
runs it, and what it writes is what users read: result.json, logs, pytest-benchmark storage."""

import json
import sys

import pytest

from conftest import LOOSE_CV
from llmbench_pytest.results import SEED_FIELDS
from llmbench_pytest.spec import DEFAULT_STRATEGIES


def results_of(path):
    return {
        json.loads(p.read_text())["strategy"]: json.loads(p.read_text())
        for p in path.glob("results/*_results/result.json")
    }


def test_every_strategy_trains_in_one_process(bench):
    result = bench.runpytest_subprocess(
        "benchmarks", LOOSE_CV, "--benchmark-autosave", "--benchmark-storage=file://./store", "-v", "-rs"
    )
    result.assert_outcomes(passed=len(DEFAULT_STRATEGIES) - 1, skipped=1)
    result.stdout.fnmatch_lines(["*test_pretrain?zero2-ws1-seq128-llama-tiny? PASSED*"])
    result.stdout.fnmatch_lines(
        ["*SKIPPED*zero3_nvme needs a directory on NVMe: pass --llmbench-nvme-path=DIR*"]
    )

    runs = results_of(bench.path)
    assert set(runs) == set(DEFAULT_STRATEGIES) - {"zero3_nvme"}
    for name, run in runs.items():
        assert tuple(run)[: len(SEED_FIELDS)] == SEED_FIELDS
        assert run["status"] == "ok" and run["error"] is None
        assert run["world_size"] == 1 and run["steps"] == 10 and run["device"] == "cpu"
        assert run["tokens_per_sec"] == pytest.approx(2 * 128 / run["mean_step_time_sec"])
        assert run["last_loss"] < run["first_loss"], name  # synthetic data is learnable
        assert len(run["step_times_sec"]) == 10
        assert {c["name"] for c in run["checks"]} == {
            "peak_memory",
            "step_time_cv",
            "loss_falls",
            "sharding_order",
        }
        assert run["metadata"]["torch"] and run["metadata"]["transformers"]
        log = bench.path / "results" / f"bench-{run['metadata']['host'].split('.')[0]}-{name}-ws1-seq128.log"
        assert "measured 10 steps" in log.read_text()
    assert runs["zero3"]["strategy_config"]["deepspeed_config"]["zero_optimization"]["stage"] == 3
    assert runs["zero2_offload"]["strategy_config"]["deepspeed_config"]["zero_optimization"][
        "offload_optimizer"
    ]
    assert runs["fsdp_grad_op"]["strategy_config"]["reshard_after_forward"] is False

    # pytest-benchmark holds the measured steps: its own compare command reads our run
    (saved,) = (bench.path / "store").rglob("0001_*.json")
    data = json.loads(saved.read_text())
    by_name = {b["name"]: b for b in data["benchmarks"]}
    zero2 = by_name["test_pretrain[zero2-ws1-seq128-llama-tiny]"]
    assert zero2["stats"]["rounds"] == 10
    assert zero2["stats"]["mean"] == pytest.approx(runs["zero2"]["mean_step_time_sec"])
    assert zero2["extra_info"]["tokens_per_sec"] == pytest.approx(runs["zero2"]["tokens_per_sec"])
    assert data["machine_info"]["llmbench"]["torch"]
    compare = bench.run(
        sys.executable, "-m", "pytest_benchmark", "--storage", "file://./store", "compare", "0001"
    )
    assert compare.ret == 0
    compare.stdout.fnmatch_lines(
        ["*test_pretrain?ddp-ws1-seq128-llama-tiny?*", "*test_pretrain?zero3-ws1-seq128-llama-tiny?*"]
    )


def _rescaled_copy(store, factor, number):
    """A saved run with every time multiplied by `factor` (a faster or slower 'baseline')."""
    (saved,) = store.rglob("0001_*.json")
    data = json.loads(saved.read_text())
    for bench in data["benchmarks"]:
        for key in ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3", "total"):
            bench["stats"][key] *= factor
        bench["stats"]["ops"] /= factor
    target = saved.with_name(f"{number:04d}_rescaled.json")
    target.write_text(json.dumps(data))


def test_compare_fail_gates_on_our_step_times(bench):
    args = ["benchmarks", LOOSE_CV, "--llmbench-strategies=ddp", "--benchmark-storage=file://./store"]
    bench.runpytest_subprocess(*args, "--benchmark-autosave").assert_outcomes(passed=1)
    store = bench.path / "store"
    _rescaled_copy(store, 0.01, 2)  # a baseline 100x faster than this machine: a regression
    _rescaled_copy(store, 100.0, 3)  # a baseline 100x slower: no regression

    slower = bench.runpytest_subprocess(
        *args, "--benchmark-compare=0002", "--benchmark-compare-fail=median:5%"
    )
    assert slower.ret != 0
    slower.stdout.fnmatch_lines(["*test_pretrain?ddp-ws1-seq128-llama-tiny? (0002_rescale)*"])
    slower.stderr.fnmatch_lines(["*Performance has regressed*"])

    faster = bench.runpytest_subprocess(
        *args, "--benchmark-compare=0003", "--benchmark-compare-fail=median:5%"
    )
    assert faster.ret == 0


def test_marker_overrides_the_session_settings(bench):
    bench.makepyfile(
        test_gpt2="""
        import pytest

        @pytest.mark.llmbench(model="gpt2-tiny", strategies="ddp,zero1", seq_lens=[64, 96], steps=3, warmup=1)
        def test_gpt2(llmbench):
            result = llmbench.train()
            assert result.model == "gpt2-tiny" and result.steps == 3
        """
    )
    result = bench.runpytest_subprocess("test_gpt2.py", "-v", "--benchmark-disable")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_gpt2?zero1-ws1-seq96-gpt2-tiny? PASSED*"])
