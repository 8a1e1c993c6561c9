"""Every strategy trains for real as `pytest benchmarks/` runs it on CPU (world sizes 1 and 2,
each a torchrun group), and what it writes is what users read: result.json, logs, the
pytest-benchmark storage that `pytest-benchmark compare` reads."""

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import FEW_STEPS, SharedBench, runs_by_config, trained_once
from llmbench_pytest.config.spec import DEFAULT_STRATEGIES
from llmbench_pytest.results.schema import SEED_FIELDS


@pytest.fixture(scope="session")
def default_matrix(shared_bench):
    """The card's command with its defaults, once: every strategy at world sizes 1 and 2."""
    bench = shared_bench("default_matrix")
    # the DeepSpeed ops built beside the first configurations, as on a GPU (there: the default)
    result = bench.runpytest_subprocess(
        "benchmarks",
        "--benchmark-autosave",
        "--benchmark-storage=file://./store",
        "-v",
        "-rs",
        "--llmbench-ops-ahead=yes",
        "--llmbench-trace-ahead=yes",
    )
    return bench, result


@pytest.mark.xdist_group("default_matrix")
def test_default_matrix_every_strategy_at_world_sizes_1_and_2(default_matrix):
    bench, result = default_matrix
    trained = [s for s in DEFAULT_STRATEGIES if s != "zero3_nvme"]
    result.assert_outcomes(passed=2 * len(trained), skipped=2)
    result.stdout.fnmatch_lines(["*test_pretrain?zero2-ws2-seq128-llama-tiny? PASSED*"])
    result.stdout.fnmatch_lines(
        ["*SKIPPED*zero3_nvme needs a directory on NVMe: pass --llmbench-nvme-path=DIR*"]
    )

    runs = runs_by_config(bench.path)
    assert set(runs) == {f"{s}-ws{w}" for s in trained for w in (1, 2)}
    for name, run in runs.items():
        assert tuple(run)[: len(SEED_FIELDS)] == SEED_FIELDS
        assert run["status"] == "ok" and run["error"] is None, name
        # adaptive by default: between the CPU minimum and cap, as many as the result says
        measured = run["timing"]["measurement"]
        assert 6 <= run["steps"] <= 12 and measured["steps"] == run["steps"], measured
        assert measured["stopped"] in ("precision", "cap") and measured["precision"] > 0
        assert run["device"] == "cpu" and run["mode"] == "launcher"
        ws = run["world_size"]
        assert run["tokens_per_sec"] == pytest.approx(ws * 2 * 128 / run["mean_step_time_sec"])
        assert run["last_loss"] < run["first_loss"], name  # synthetic data is learnable
        assert len(run["step_times_sec"]) == run["steps"] and len(run["per_rank"]) == ws
        # the warm-up's steps one by one (the CPU default: two), inside the warm-up's own time
        warmup = run["timing"]["warmup_step_sec"]
        assert len(warmup) == 2 and min(warmup) > 0, warmup
        assert sum(warmup) <= run["timing"]["setup_phases"]["warmup_sec"], name
        # each rank's collections inside the window, by generation, for a noisy step time's reader
        assert all(len(r["gc_pauses"]["collections"]) == 3 for r in run["per_rank"]), name
        checks = {c["name"]: c for c in run["checks"]}
        assert set(checks) >= {"peak_memory", "model_states", "step_time_cv", "mean_interval", "loss_falls"}
        assert set(checks) >= {"sharding_order", "scaling", "repeat_spread"}
        assert checks["peak_memory"]["passed"] is True and checks["peak_memory"]["limit"] == 24.0  # tier A
        # timing quality is recorded on CPU, not judged; one run has no between-runs spread
        assert checks["mean_interval"]["passed"] is None and checks["mean_interval"]["measured"] > 0
        assert checks["step_time_cv"]["passed"] is None
        # every strategy holds the model states its name says, run by run, offload aside
        states = checks["model_states"]
        assert states["passed"] is (None if "offload" in name else True), states
        # the whole peak is predicted before the run, for the GPU; a CPU run gets no verdict on it
        assert run["peak_predicted_gb"] > 0 and run["peak_prediction"]["parts"]["activations"] > 0, name
        assert (
            checks["peak_prediction"]["passed"] is None
            and "no verdict on a CPU" in checks["peak_prediction"]["message"]
        )
        assert run["metadata"]["torch"] and run["metadata"]["transformers"]
    # at world size 2 the scaling against world size 1 is measured and recorded
    for name in trained:
        scaling = next(c for c in runs[f"{name}-ws2"]["checks"] if c["name"] == "scaling")
        assert scaling["passed"] is None and scaling["measured"] > 0 and "weak scaling" in scaling["message"]
    # every strategy trains the same model at the same rates: the warm-up's rates reach DeepSpeed's
    # optimizers (wrapped, offloaded) as they reach torch's, so the losses agree step for step (a
    # strategy at its peak rate from the first update would part from the others at the second)
    for ws in (1, 2):
        reference = runs[f"ddp-ws{ws}"]["losses"]
        for name in trained:
            run = runs[f"{name}-ws{ws}"]
            assert run["strategy_config"]["learning_rate"] == {
                "schedule": "linear warm-up",
                "peak": 1e-3,
                "warmup_updates": 40,
            }, name
            shared = min(len(run["losses"]), len(reference))
            assert run["losses"][:shared] == pytest.approx(reference[:shared], rel=2e-3), name
    assert runs["zero3-ws1"]["strategy_config"]["deepspeed_config"]["zero_optimization"]["stage"] == 3
    # the ops the matrix needs were built (here: found built) beside it, and said so apart
    ahead = json.loads((bench.path / "results" / "latest" / "ops-ahead.json").read_text())
    assert set(ahead) == {"shm_comm", "cpu_adam"} and all(o["sec"] > 0 for o in ahead.values())
    result.stdout.fnmatch_lines(["DeepSpeed ops built beside the first configurations*cpu_adam*"])
    # the peak predictions' traces were made (or found kept) beside it, none left marked pending
    traced = json.loads((bench.path / "results" / "latest" / "trace-ahead.json").read_text())
    assert traced["configurations"] == len(runs) and not [t for t in traced["traced"] if "error" in t]
    assert not list(Path(os.environ["LLMBENCH_CACHE_DIR"]).rglob("*.pending"))
    assert runs["zero2_offload-ws2"]["strategy_config"]["deepspeed_config"]["zero_optimization"][
        "offload_optimizer"
    ]
    assert runs["fsdp_grad_op-ws1"]["strategy_config"]["reshard_after_forward"] is False

    # pytest-benchmark holds the measured steps: its own compare command reads our run
    (saved,) = (bench.path / "store").rglob("0001_*.json")
    data = json.loads(saved.read_text())
    by_name = {b["name"]: b for b in data["benchmarks"]}
    zero2 = by_name["test_pretrain[zero2-ws2-seq128-llama-tiny]"]
    assert zero2["stats"]["rounds"] == runs["zero2-ws2"]["steps"]
    assert zero2["stats"]["mean"] == pytest.approx(runs["zero2-ws2"]["mean_step_time_sec"])
    assert zero2["extra_info"]["tokens_per_sec"] == pytest.approx(runs["zero2-ws2"]["tokens_per_sec"])
    assert data["machine_info"]["llmbench"]["torch"]
    compare = bench.run(
        sys.executable, "-m", "pytest_benchmark", "--storage", "file://./store", "compare", "0001"
    )
    assert compare.ret == 0
    compare.stdout.fnmatch_lines(
        ["*test_pretrain?ddp-ws1-seq128-llama-tiny?*", "*test_pretrain?zero3-ws2-seq128-llama-tiny?*"]
    )


IN_PROCESS = "in_process_session"


def in_process_session(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    """One in-process session, trained once per test process, for the tests marked
    xdist_group(IN_PROCESS), here and in test_faults.py: zero0, ddp, fsdp and zero2 one after the
    other in the pytest process, zero0 raising a runtime error at its first measured step."""
    return trained_once(
        shared_bench,
        IN_PROCESS,
        "benchmarks",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=zero0,ddp,fsdp,zero2",
        *FEW_STEPS,
        env={"LLMBENCH_INJECT_FAULT": "zero0:error"},
    )


@pytest.fixture
def in_process(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    return in_process_session(shared_bench)


@pytest.mark.xdist_group(IN_PROCESS)
def test_in_process_one_rank_group(in_process):
    bench, result = in_process
    result.assert_outcomes(passed=3, failed=1)  # the failure: zero0's (test_faults)
    runs = runs_by_config(bench.path)
    assert set(runs) == {"zero0-ws1", "ddp-ws1", "fsdp-ws1", "zero2-ws1"}
    for run in runs.values():
        assert run["mode"] == "in-process"
        if run["strategy"] == "zero0":
            continue
        assert run["status"] == "ok"
        log = (
            bench.path
            / "results"
            / "latest"
            / f"bench-{run['metadata']['host'].split('.')[0]}-{run['strategy']}-ws1-seq128.log"
        )
        assert f"measured {run['steps']} steps" in log.read_text()


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


@pytest.mark.xdist_group("default_matrix")
def test_compare_fail_gates_on_our_step_times(default_matrix):
    # the default matrix's saved run is the baseline; ddp-ws1 trains again in-process and is compared
    bench, _ = default_matrix
    args = ["benchmarks", "--llmbench-strategies=ddp", "--llmbench-launch=inprocess", *FEW_STEPS]
    args += ["--llmbench-results-dir=compared", "--benchmark-storage=file://./store"]
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
    result = bench.runpytest_subprocess(
        "test_gpt2.py", "-v", "--benchmark-disable", "--llmbench-world-sizes=1"
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_gpt2?zero1-ws1-seq96-gpt2-tiny? PASSED*"])
