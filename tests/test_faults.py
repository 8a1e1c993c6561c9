"""A failure inside one configuration is that configuration's result, not the session's end.

Faults are injected with LLMBENCH_INJECT_FAULT inside the real training step, so the path they
take (status, result.json, rank agreement, the next test) is the one a real failure takes.
"""

import pytest
from test_train_cpu import IN_PROCESS, in_process_session
from test_warm_ranks import WARM, warm_matrix_session

from conftest import FEW_STEPS, runs_by_config, torchrun


def result_of(bench, name, ws=1):
    return runs_by_config(bench.path)[f"{name}-ws{ws}"]


@pytest.fixture
def warm_matrix(shared_bench):
    """test_warm_ranks' warm-group session (fsdp runs out of memory), trained once for all three files."""
    return warm_matrix_session(shared_bench)


@pytest.mark.xdist_group(WARM)
def test_oom_in_one_configuration_fails_only_that_test(warm_matrix):
    # test_warm_ranks' session: fsdp runs out of memory in the group that served ddp and zero1
    # before it, and fsdp_grad_op trains after it in a fresh group (and zero2 after that, whose
    # failure is its own check's, test_check_faults')
    bench, result = warm_matrix
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_pretrain?fsdp-ws2-seq128-llama-tiny? FAILED*",
            "*test_pretrain?fsdp_grad_op-ws2-seq128-llama-tiny? PASSED*",
            "*Failed: fsdp oom: rank 0: torch.OutOfMemoryError: out of memory (injected*",
            "*result: */bench-*-fsdp-ws2-seq128_results/result.json",
        ]
    )
    fsdp = result_of(bench, "fsdp", ws=2)
    assert fsdp["status"] == "oom" and "out of memory" in fsdp["error"]
    assert fsdp["tokens_per_sec"] is None
    assert result_of(bench, "fsdp_grad_op", ws=2)["status"] == "ok"
    # the out-of-memory error is fsdp's result alone: every other run trained to its end
    failed = sorted(name for name, run in runs_by_config(bench.path).items() if run["status"] != "ok")
    assert failed == ["fsdp-ws2"], failed


@pytest.fixture
def in_process(shared_bench):
    """test_train_cpu's in-process session (zero0 raises), trained once for both files."""
    return in_process_session(shared_bench)


@pytest.mark.xdist_group(IN_PROCESS)
def test_runtime_error_is_recorded_as_error(in_process):
    # test_train_cpu's in-process session: zero0 raises, then ddp, fsdp and zero2 train after it in
    # the same process
    bench, result = in_process
    result.assert_outcomes(passed=3, failed=1)
    zero0 = result_of(bench, "zero0")
    assert zero0["status"] == "error" and "RuntimeError: injected failure" in zero0["error"]
    assert result_of(bench, "ddp")["status"] == "ok"


def test_oom_on_one_rank_fails_the_test_on_every_rank_within_the_timeout(bench, monkeypatch):
    # rank 1 fails before its first measured step while rank 0 waits in DDP's all-reduce:
    # the collective timeout ends the wait, and both ranks report rank 1's out-of-memory
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:oom:1")
    result = torchrun(
        bench, 2, "benchmarks", *FEW_STEPS, "--llmbench-strategies=ddp", "--llmbench-timeout=8", timeout=240
    )
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*Failed: ddp oom: rank 1: torch.OutOfMemoryError*", "*1 failed*"])
    ddp = result_of(bench, "ddp", ws=2)
    assert ddp["status"] == "oom" and ddp["error"].startswith("rank 1:") and 1 in ddp["failed_ranks"]
