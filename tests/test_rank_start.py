"""How ranks start: on a CPU forks of torchrun's agent, which imported torch and the models once
(worker/agent.py); on a GPU, and with LLMBENCH_RANKS=exec, new interpreters. Either way they
train the same model to the same losses, with the threads a new rank would have."""

from __future__ import annotations

import json

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
