"""A failure inside one configuration is that configuration's result, not the session's end.

Faults are injected with LLMBENCH_INJECT_FAULT inside the real training step, so the path they
take (status, result.json, rank agreement, the next test) is the one a real failure takes.
"""

from conftest import runs_by_config, torchrun


def result_of(bench, name, ws=1):
    return runs_by_config(bench.path)[f"{name}-ws{ws}"]


def test_oom_in_one_configuration_fails_only_that_test(bench, monkeypatch):
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "zero2:oom")
    result = bench.runpytest_subprocess(
        "benchmarks", "--llmbench-strategies=ddp,zero2,fsdp", "--llmbench-world-sizes=1", "-v"
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_pretrain?zero2-ws1-seq128-llama-tiny? FAILED*",
            "*test_pretrain?fsdp-ws1-seq128-llama-tiny? PASSED*",
            "*Failed: zero2 oom: rank 0: torch.OutOfMemoryError: out of memory (injected*",
            "*result: */bench-*-zero2-ws1-seq128_results/result.json",
        ]
    )
    zero2 = result_of(bench, "zero2")
    assert zero2["status"] == "oom" and "out of memory" in zero2["error"]
    assert zero2["tokens_per_sec"] is None
    assert result_of(bench, "fsdp")["status"] == "ok"


def test_runtime_error_is_recorded_as_error(bench, monkeypatch):
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:error")
    result = bench.runpytest_subprocess(
        "benchmarks", "--llmbench-strategies=ddp,zero0", "--llmbench-launch=inprocess"
    )
    result.assert_outcomes(passed=1, failed=1)
    ddp = result_of(bench, "ddp")
    assert ddp["status"] == "error" and "RuntimeError: injected failure" in ddp["error"]


def test_oom_on_one_rank_fails_the_test_on_every_rank_within_the_timeout(bench, monkeypatch):
    # rank 1 fails before its first measured step while rank 0 waits in DDP's all-reduce:
    # the collective timeout ends the wait, and both ranks report rank 1's out-of-memory
    monkeypatch.setenv("LLMBENCH_INJECT_FAULT", "ddp:oom:1")
    result = torchrun(
        bench, 2, "benchmarks", "--llmbench-strategies=ddp", "--llmbench-timeout=15", timeout=240
    )
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*Failed: ddp oom: rank 1: torch.OutOfMemoryError*", "*1 failed*"])
    ddp = result_of(bench, "ddp", ws=2)
    assert ddp["status"] == "oom" and ddp["error"].startswith("rank 1:") and 1 in ddp["failed_ranks"]
