"""In-rank mode: `torchrun --nproc_per_node=2 -m pytest benchmarks/`, real gloo groups on CPU.

Every rank runs pytest; rank 0 alone prints and writes; the ranks agree on collection and on
every outcome, so a skip or failure on one rank can neither deadlock nor go unreported.
"""

import itertools
import json
import socket
import subprocess

import pytest
import yaml

from conftest import FEW_STEPS, REPO, RUNS, SharedBench, ran_once, start_torchrun, torchrun
from llmbench_pytest.config.spec import DEFAULT_STRATEGIES


def test_every_strategy_trains_on_two_ranks_and_shards(bench):
    # a short fixed measurement: what is tested here is in-rank mode (every rank runs pytest, rank 0
    # writes), and the sharding each strategy reaches; the adaptive window is test_train_cpu's
    result = torchrun(
        bench, 2, "benchmarks", *FEW_STEPS, "--junitxml=junit.xml", "--benchmark-json=bench.json", "-rA"
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    out = result.stdout.str()
    assert out.count("9 passed, 1 skipped") == 1  # only rank 0 prints its summary

    files = sorted(bench.path.glob(f"{RUNS}/*_results/result.json"))
    runs = {json.loads(p.read_text())["strategy"]: json.loads(p.read_text()) for p in files}
    assert len(files) == len(runs) == len(DEFAULT_STRATEGIES) - 1  # one writer: no second copies
    for name, run in runs.items():
        assert run["status"] == "ok", name
        assert run["world_size"] == 2 and run["nodes"] == 1 and run["ranks_per_node"] == 2
        assert [r["rank"] for r in run["per_rank"]] == [0, 1]
    # every strategy holds the model states its name says, checked by the suite itself, run by run
    for name, run in runs.items():
        states = next(c for c in run["checks"] if c["name"] == "model_states")
        assert states["passed"] is (None if "offload" in name else True), states
    # the states fall in the order their predictions give wherever the predictions are 10% apart;
    # the order by name holds for the strategies that keep no bucket of the model's size (ZeRO-3
    # keeps a reduce bucket of up to the model's size, config/strategy_settings.py: on a model this
    # small it outweighs what ZeRO-3 shards beyond ZeRO-2)
    states = {name: run["model_state_gb"] for name, run in runs.items() if "offload" not in name}
    predicted = {name: runs[name]["model_state_predicted_gb"] for name in states}
    for a, b in itertools.permutations(states, 2):
        if predicted[a] < 0.9 * predicted[b]:
            assert states[a] < states[b], (a, b, states, predicted)
    assert states["zero2"] < states["zero1"] < states["ddp"] and states["fsdp"] < states["ddp"]
    assert states["zero3"] < states["ddp"]
    assert (bench.path / "junit.xml").read_text().count("<testcase") == len(DEFAULT_STRATEGIES)
    assert (
        len(json.loads((bench.path / "bench.json").read_text())["benchmarks"]) == len(DEFAULT_STRATEGIES) - 1
    )


AGREEMENT = """
import os

import pytest
import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])


@pytest.fixture
def needs_a_thing():
    if RANK == 1:
        pytest.skip("rank 1 has no thing")


def test_collective_after_a_skip_on_one_rank(needs_a_thing):
    t = torch.ones(1)
    dist.all_reduce(t)  # would wait forever on rank 0 if rank 1 had silently skipped


def test_fails_on_rank_1_only():
    assert RANK != 1, "rank 1 is broken"


def test_session_goes_on():
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""


IN_RANK = "in_rank_session"


def in_rank_session(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    """One in-rank session of two ranks, run once per test process for the tests marked
    xdist_group(IN_RANK), here and in test_zero1_overlap_census.py (one torchrun group and its
    ranks' start-up instead of two): ZeRO-1 and a ZeRO-2 run at stage 1, with overlap_comm on
    (that file's conftest), then AGREEMENT's tests, whose outcomes differ between the ranks."""
    from test_zero1_overlap_census import OVERLAP_ON

    def run(bench: SharedBench) -> pytest.RunResult:
        (bench.path / "conftest.py").write_text(OVERLAP_ON)  # each rank is a pytest process that loads it
        (bench.path / "test_agree.py").write_text(AGREEMENT)
        args = [
            "benchmarks/test_pretrain.py",
            "test_agree.py",
            *FEW_STEPS,
            "--llmbench-strategies=zero1,zero2",
        ]
        return bench.torchrun(
            2, *args, "-rA", "-p", "no:cacheprovider", env={"LLMBENCH_INJECT_FAULT": "zero2:stage=1"}
        )

    return ran_once(shared_bench, IN_RANK, run)


@pytest.fixture
def in_rank(shared_bench) -> tuple[SharedBench, pytest.RunResult]:
    return in_rank_session(shared_bench)


@pytest.mark.xdist_group(IN_RANK)
def test_ranks_agree_on_every_outcome(in_rank):
    _, result = in_rank
    result.stdout.fnmatch_lines(
        [
            "*PASSED test_agree.py::test_session_goes_on*",
            "SKIPPED * rank 1 skipped: rank 1 has no thing",
            "*FAILED test_agree.py::test_fails_on_rank_1_only*",
            # AGREEMENT's one failure, pass and skip; zero1's pass and zero2's failure (its check)
            "*2 failed, 2 passed, 1 skipped*",
        ]
    )
    result.stdout.fnmatch_lines(["*rank 1 failed in call (rank 0 did not)*", "*rank 1 is broken*"])


def test_ranks_that_collect_different_tests_stop_with_an_error(bench):
    bench.makepyfile(
        test_two="def test_a(): pass\ndef test_b(): pass\n",
        conftest="""
        import os

        def pytest_collection_modifyitems(items):
            if os.environ.get("RANK") == "1":
                del items[-1]
        """,
    )
    result = torchrun(bench, 2, "test_two.py", timeout=180)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*ranks collected different tests (rank 0: 2 tests, rank 1: 1 tests)*"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_through_torchruns_own_rendezvous(bench):
    """Two torchrun agents on one machine stand in for two nodes (c10d rendezvous, gloo)."""
    port = _free_port()
    argv = [
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=llmbench-two-nodes",
        "-m",
        "pytest",
        "benchmarks",
        "--llmbench-strategies=ddp,zero3",
        *FEW_STEPS,
        "-p",
        "no:cacheprovider",
    ]
    logs = [bench.path / f"node{n}.log" for n in range(2)]
    agents = [start_torchrun(argv, bench.path, log) for log in logs]
    codes = [a.wait(timeout=400) for a in agents]
    outputs = [log.read_text(errors="replace") for log in logs]
    assert codes == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    files = list(bench.path.glob(f"{RUNS}/*_results/result.json"))
    assert len(files) == 2  # global rank 0 alone wrote
    for path in files:
        run = json.loads(path.read_text())
        assert run["status"] == "ok"
        assert run["world_size"] == 2 and run["nodes"] == 2 and run["ranks_per_node"] == 1


def test_slurm_and_kubernetes_examples_start_the_suite_under_torchrun():
    sbatch = REPO / "ci" / "slurm" / "llmbench.sbatch"
    subprocess.run(["bash", "-n", str(sbatch)], check=True)  # parses
    text = sbatch.read_text()
    assert "--rdzv-backend=c10d" in text and "-m pytest benchmarks/" in text and "srun" in text
    job = yaml.safe_load((REPO / "ci" / "kubernetes" / "pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob"
    for role in ("Master", "Worker"):
        (container,) = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"]
        assert container["command"] == ["torchrun"] and container["args"][:3] == [
            "-m",
            "pytest",
            "benchmarks/",
        ]
