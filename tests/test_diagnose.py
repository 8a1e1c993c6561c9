"""Which rank a crashed group blames: torchrun's "root cause" is the first failure it has a record
of, and a rank killed by a signal leaves none, so the peers whose collectives failed after it would
be blamed instead (seen: "rank 0 died (exit code 1)" for a group whose rank 1 was SIGKILLed)."""

from __future__ import annotations

from llmbench_pytest.launch.diagnose import crash


def _agent(root: tuple[int, int], other: tuple[int, int]) -> str:
    def entry(rank: int, code: int) -> str:
        return (
            "  time      : 2026-11-26_04:55:40\n  host      : vm\n"
            f"  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {code} (pid: {4000 + rank})\n  error_file: <N/A>\n"
        )

    return (
        "torch.distributed.elastic.multiprocessing.api:failed\nFailures:\n[1]:\n" + entry(*other)
        + "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n" + entry(*root)
    )  # fmt: skip


def _logs(tmp_path, *texts: str):
    paths = []
    for rank, text in enumerate(texts):
        path = tmp_path / f"rank{rank}.log"
        path.write_text(text)
        paths.append(path)
    return paths


LOST = (
    "rank0 INFO warmup 1/1 loss 7.6\n"
    "[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:45287. "
    "This is typically caused by a remote worker crashing.\n"
)


def test_a_rank_killed_by_a_signal_is_blamed_before_the_peer_that_lost_it(tmp_path):
    logs = _logs(tmp_path, LOST, "rank1 INFO warmup 1/1 loss 7.6\n")
    got = crash(logs, tmp_path / "agent.log", _agent(root=(0, 1), other=(1, -9)), 1)
    assert got.error.startswith("rank 1 died (signal 9 (SIGKILL)); last lines of rank1.log:"), got.error
    assert got.failed_ranks == [1, 0]


def test_a_rank_that_failed_on_its_own_is_blamed_before_one_that_lost_a_peer(tmp_path):
    logs = _logs(tmp_path, LOST, "rank1 INFO step 3\n[rank1]: ValueError: a bad batch\n")
    got = crash(logs, tmp_path / "agent.log", _agent(root=(0, 1), other=(1, 1)), 1)
    assert got.error.startswith("rank 1 died (exit code 1)"), got.error


def test_torchruns_root_cause_stands_when_nothing_says_otherwise(tmp_path):
    logs = _logs(tmp_path, "[rank0]: RuntimeError: boom\n", "rank1 INFO warmup 1/1\n")
    got = crash(logs, tmp_path / "agent.log", _agent(root=(0, 1), other=(1, -15)), 1)
    assert got.error.startswith("rank 0 died (exit code 1)"), got.error
    assert got.failed_ranks == [0, 1]
