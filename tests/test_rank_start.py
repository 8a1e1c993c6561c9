"""How ranks start: on a CPU forks of torchrun's agent, which imported torch and the models once
(worker/agent.py); on a GPU, and with LLMBENCH_RANKS=exec, new interpreters. Either way they
train the same model to the same losses, with the threads a new rank would have."""

from __future__ import annotations

import json

import pytest

from conftest import FEW_STEPS


def test_forked_and_new_ranks_train_alike_and_say_how_they_started(bench, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU's way is what is compared, on a GPU host too
    got = {}
    for start in ("fork", "exec"):
        monkeypatch.setenv("LLMBENCH_RANKS", start)
        result = bench.runpytest_subprocess(
            "benchmarks",
            *FEW_STEPS,
            "--llmbench-strategies=ddp",
            "--llmbench-world-sizes=2",
            f"--llmbench-results-dir={start}",
        )
        result.assert_outcomes(passed=1)
        (path,) = (bench.path / start / "latest").glob("*ddp-ws2*_results/result.json")
        got[start] = json.loads(path.read_text())
    for start, run in got.items():
        assert run["status"] == "ok"
        assert run["timing"]["rank_process"]["start"] == start
        # torchrun asks for one intra-op thread per rank; a fork must not keep the agent's count
        assert run["metadata"]["cpu_threads_per_rank"] == 1
        assert run["leftover_after_run"]["settings"] == []
    # the same seed, data and arithmetic: a fork computes what a new process does, step for step
    fork, new = ([*run["warmup_losses"], *run["losses"]] for run in (got["fork"], got["exec"]))
    assert fork == new


def test_a_ranks_error_file_cut_short_is_reported_as_its_exit_and_not_fatal_to_the_agent(tmp_path):
    # a rank SIGKILLed while it wrote its error file leaves it cut short; torch's own record of the
    # failure raised on it (the agent ended with exit code 70 instead of naming the rank)
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from llmbench_pytest.worker.agent import _Failure

    cut = tmp_path / "cut.json"
    cut.write_text('{"message": {"message": "RuntimeErr')
    with pytest.raises(ValueError):  # if torch ever reads it, _Failure is needless
        ProcessFailure(local_rank=1, pid=1, exitcode=-9, error_file=str(cut))
    failure = _Failure(local_rank=1, pid=1, exitcode=-9, error_file=str(cut))
    assert failure.signal_name() == "SIGKILL" and "Signal 9 (SIGKILL)" in failure.message
    assert not cut.exists()
    # a whole error file is still read as torch reads it
    whole = tmp_path / "whole.json"
    record = {"message": {"message": "RuntimeError: boom", "extraInfo": {"timestamp": "1"}}}
    whole.write_text(json.dumps(record))
    read = _Failure(local_rank=0, pid=2, exitcode=1, error_file=str(whole))
    assert "RuntimeError: boom" in str(read.message) and whole.exists()
