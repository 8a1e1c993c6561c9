"""Each GPU rank's share of the host: unless the user sets OMP_NUM_THREADS, cores / ranks threads,
bound to a disjoint slice, at every world size. torchrun alone gives one thread per rank whenever
it starts several and all the cores to a single one, so on 4x H200 zero2_offload's CPU Adam ran on
1 thread per rank at 2 and 4 GPUs against 64 at 1, and "scaled" 44% and 56% (issue 41)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmbench_pytest.config import host_share


def test_each_rank_gets_a_disjoint_contiguous_share():
    cores = list(range(64))
    shares = [host_share.slice_for(cores, 4, r) for r in range(4)]
    assert [len(s) for s in shares] == [16] * 4 and shares[1] == list(range(16, 32))
    assert not set(shares[0]) & set(shares[3])
    assert host_share.slice_for(cores, 1, 0) == cores  # one rank: every core, as at world size 1
    assert host_share.slice_for([0, 1], 4, 3) == [1]  # fewer cores than ranks: one each, shared


def test_the_launcher_gives_gpu_ranks_their_share_unless_the_user_chose(monkeypatch):
    monkeypatch.setattr(host_share, "usable_cores", lambda: list(range(64)))
    env = host_share.group_env({}, 4, "cuda")
    assert env["OMP_NUM_THREADS"] == "16" and env[host_share.POLICY_ENV] == "share"
    assert env[host_share.BIND_ENV].split(",")[:3] == ["0", "1", "2"]
    assert host_share.group_env({}, 1, "cuda")["OMP_NUM_THREADS"] == "64"  # the same policy at one rank
    assert host_share.group_env({"OMP_NUM_THREADS": "8"}, 4, "cuda") == {host_share.POLICY_ENV: "user"}
    assert host_share.group_env({}, 2, "cpu") == {}  # a CPU's ranks keep one thread each (worker/dist.py)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_a_rank_binds_to_its_slice_and_result_json_says_so():
    cores = sorted(os.sched_getaffinity(0))
    code = (
        "import json, os; from llmbench_pytest.config import host_share as h; "
        "mine = h.bind_this_rank(1, 2); "
        "print(json.dumps([mine, sorted(os.sched_getaffinity(0)), h.describe(3, mine, 2)]))"
    )
    env = {**os.environ, host_share.BIND_ENV: ",".join(map(str, cores)), host_share.POLICY_ENV: "share"}
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    import json

    mine, now, record = json.loads(out.stdout)
    assert mine == now == host_share.slice_for(cores, 2, 1)
    assert record["policy"] == "share" and record["threads"] == 3 and record["core_count"] == len(mine)
    assert record["note"] is None


def test_one_thread_per_rank_by_torchrun_is_named(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(host_share.POLICY_ENV, raising=False)
    record = host_share.describe(1, [0, 1, 2, 3], 4)
    assert record["policy"] == "user" and "one thread per rank" in record["note"]
    assert record["cores"] == "0-3"
