"""Which rank a crashed group blames: torchrun's "root cause" is the first failure it has a record
of, and a rank killed by a signal leaves none, so the peers whose collectives failed after it would
be blamed instead (seen: "rank 0 died (exit code 1)" for a group whose rank 1 was SIGKILLed)."""

from __future__ import annotations

from llmbench_pytest.launch.diagnose import behind, crash, hang, reported_failure


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


# A hang names the rank behind in the group's collectives (worker/beacon.py's counts): on 4x H200
# an injected hang of rank 3 was reported as "rank 2 made no progress", rank 2 being the quietest
# of the ranks waiting for rank 3 in backward's collectives.


def test_a_hang_names_the_rank_behind_in_the_collectives_not_the_quietest(tmp_path):
    logs = _logs(tmp_path, "r0\n", "r1\n", "r2\n", "r3\n")
    quiet = [(0, 80.0, "step 1"), (1, 79.0, "step 1"), (2, 90.0, "step 1"), (3, 76.0, "step 1")]
    m = hang(logs, quiet, 75.0, seqs={0: 58, 1: 58, 2: 58, 3: 57})
    assert m.failed_ranks[0] == 3
    assert m.error.startswith("hang: rank 3 made no progress for 76 s")
    assert "it issued 57 collectives on the training group where the others issued 58" in m.error
    # without the counts (an older worker), the quietest comes first, as before
    assert hang(logs, quiet, 75.0).failed_ranks[0] == 2


def test_behind_is_empty_when_every_rank_issued_as_many():
    assert behind({0: 12, 1: 12}) == [] and behind({0: 12}) == [] and behind({0: 11, 1: 12, 2: 11}) == [0, 2]


def test_a_reported_failure_is_the_rank_that_failed_on_its_own_even_when_a_peer_timed_out_first(tmp_path):
    logs = _logs(tmp_path, "r0\n", "r1\n")
    failures = {
        0: {
            "status": "error",
            "error": "rank 0: RuntimeError: Timed out waiting 8000ms for recv",
            "time": 1.0,
        },
        1: {"status": "oom", "error": "rank 1: torch.OutOfMemoryError: out of memory", "time": 2.0},
    }
    m = reported_failure(failures, {0: 6, 1: 5}, logs, waited=5.2)
    assert m.status == "oom" and m.error.startswith("rank 1: torch.OutOfMemoryError")
    assert m.failed_ranks == [1, 0]
    assert "the group was ended 5 s later" in m.error


def test_reported_timeouts_alone_name_the_rank_that_never_came(tmp_path):
    logs = _logs(tmp_path, "r0\n", "r1\nrank1 INFO warmup 1/1\n")
    failures = {
        0: {"status": "error", "error": "rank 0: NCCL watchdog: collective operation timeout", "time": 1.0}
    }
    m = reported_failure(failures, {0: 9, 1: 8}, logs, waited=5.0)
    assert m.status == "error" and m.error.startswith("hang: rank 1 stopped: it stopped first")
    assert "while waiting for it: rank 0: rank 0: NCCL watchdog" in m.error
    assert m.failed_ranks == [1, 0]


def test_the_rank_behind_is_named_even_when_a_waiting_peer_crossed_the_limit_alone(tmp_path):
    # 2x H200, fsdp with rank 1 hung: only rank 0 had crossed the quiet limit when it was looked at
    logs = _logs(tmp_path, "r0\n", "r1\n")
    quiet = [(0, 40.2, "warmup 1/1")]
    everyone = [(0, 40.2, "warmup 1/1"), (1, 39.9, "warmup 1/1")]
    m = hang(logs, quiet, 40.0, seqs={0: 52, 1: 51}, everyone=everyone)
    assert m.failed_ranks == [1, 0] and m.error.startswith("hang: rank 1 made no progress for 40 s")
    assert "it issued 51 collectives on the training group where the others issued 52" in m.error
