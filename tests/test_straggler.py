"""A straggler is named (analysis/straggler.py): the rank whose own work exceeds the others' by more
than their noise, with what it costs a step, in result.json and the report, whether or not a check
fails; healthy runs name none. The rule on hand-made per-rank records first, then on two sessions
other tests train anyway: test_launcher's (rank 1 of a two-rank zero2 sleeps 1 s before every
optimizer step) and test_warm_ranks' healthy two-rank runs.
"""

from __future__ import annotations

import pytest
from test_launcher import KILLED, killed_rank_session
from test_warm_ranks import WARM, warm_matrix_session

from conftest import saved_results
from llmbench_pytest.analysis.straggler import find
from llmbench_pytest.report.summary.build import write_report

STEPS = [0.40, 0.41, 0.39, 0.40, 0.42, 0.40, 0.41, 0.40]


def rank(index: int, optimizer: list[float], trace: dict | None = None, util: float | None = None) -> dict:
    monitor = {"util_pct_mean": util} if util is not None else None
    return {"rank": index, "optimizer_host_sec_steps": optimizer, "trace": trace, "gpu_monitor": monitor}


def steady(base: float, n: int = 8) -> list[float]:
    return [base * (1 + 0.02 * ((i % 3) - 1)) for i in range(n)]


def test_a_rank_held_up_before_its_optimizer_step_is_named_with_its_cost():
    found = find([rank(0, steady(0.01)), rank(1, steady(0.31)), rank(2, steady(0.01))], STEPS, "cpu")
    assert found is not None and found["rank"] == 1 and found["measure"] == "optimizer"
    assert found["cost_sec_per_step"] == pytest.approx(0.30, abs=0.01)
    assert found["cost_fraction_of_step"] == pytest.approx(0.30 / 0.40375, rel=0.05)
    assert found["message"].startswith("rank 1 held the others back: its host time inside the optimizer step")


def test_ranks_that_differ_within_their_noise_name_none():
    noisy = [[0.010, 0.030, 0.012, 0.028, 0.011, 0.031, 0.010, 0.029], [0.012, 0.031, 0.010, 0.030] * 2]
    found = find([rank(0, noisy[0]), rank(1, noisy[1])], STEPS, "cpu")
    assert found is not None and found["rank"] is None and found["message"] is None
    (optimizer,) = found["measures"]
    assert not optimizer["named"] and optimizer["excess_sec"] < optimizer["bound_sec"]


def test_a_cost_below_what_the_mean_step_is_known_to_is_no_finding():
    # 8 ms more, steadily, but the steps themselves swing by tens of percent (a CPU's)
    swinging = [0.2, 0.6, 0.3, 0.5, 0.2, 0.6, 0.3, 0.5]
    found = find([rank(0, steady(0.010)), rank(1, steady(0.018))], swinging, "cpu")
    assert found is not None and found["rank"] is None


def test_on_a_gpu_the_profiled_idle_names_a_host_bound_rank():
    # rank 2's GPU waits for its host; the others run NCCL's kernel while they wait for it (busy)
    def trace(compute: float, idle: float) -> dict:
        return {"steps": 1, "compute_sec_per_step": compute, "device_idle_sec_per_step": idle}

    # (the 4-GPU run: GPU busy 56% over the window against 88%)
    util = {0: 88.0, 1: 89.0, 2: 56.0, 3: 88.0}
    ranks = [rank(r, steady(0.002), trace(0.30, 0.209 if r == 2 else 0.008), util[r]) for r in range(4)]
    found = find(ranks, STEPS, "cuda")
    assert found is not None and found["rank"] == 2 and found["measure"] == "host"
    assert found["cost_sec_per_step"] == pytest.approx(0.201)
    assert {m["name"]: m["named"] for m in found["measures"]} == {
        "optimizer": False,
        "compute": False,
        "host": True,
    }


def test_one_profiled_step_the_window_does_not_bear_out_names_none():
    """Healthy llama-7b zero3 at 4 GPUs on 4x H200 (2026-11-28): rank 3's GPU idled 0.785 s in the
    profiled step against 0.145 s, but over the window its utilization, 72%, was within three
    times the others' spread (84% median, 8 points): a different rank falls behind in each ZeRO-3
    step. Without utilization over the window nothing bears it out either."""

    def trace(idle: float) -> dict:
        return {"steps": 1, "compute_sec_per_step": 0.25, "device_idle_sec_per_step": idle}

    idle = (0.145, 0.026, 0.147, 0.785)
    for util in ((87.7, 84.1, 79.6, 71.8), (None,) * 4):
        ranks = [rank(r, steady(0.0008), trace(idle[r]), util[r]) for r in range(4)]
        found = find(ranks, [0.808 * (1 + 0.15 * ((i % 3) - 1)) for i in range(13)], "cuda")
        assert found is not None and found["rank"] is None, found
        (host,) = [m for m in found["measures"] if m["name"] == "host"]
        assert host["excess_sec"] > host["bound_sec"] and not host["named"]
        assert "not borne out" in host["note"] or "no GPU utilization" in host["note"]
    # two ranks (the suite's healthy LoRA zero3 on 2x H200: 0.764 s idle against 0.061 s in the
    # profiled step, utilization 52% against 66%): one other rank gives no spread to hold it to
    pair = [rank(r, steady(0.0008), trace(idle[r * 3]), (66.0, 51.7)[r]) for r in range(2)]
    found = find(pair, [1.005 * (1 + 0.15 * ((i % 3) - 1)) for i in range(13)], "cuda")
    assert found is not None and found["rank"] is None, found
    assert "two ranks" in next(m for m in found["measures"] if m["name"] == "host")["note"]


def test_one_rank_has_no_straggler():
    assert find([rank(0, steady(0.3))], STEPS, "cpu") is None


@pytest.fixture
def killed_rank_matrix(shared_bench):
    return killed_rank_session(shared_bench)


@pytest.mark.xdist_group(KILLED)
def test_the_injected_straggler_is_named_in_the_result_and_the_report(killed_rank_matrix, tmp_path):
    bench, _ = killed_rank_matrix
    (zero2,) = [r for r in saved_results(bench.path) if r["strategy"] == "zero2" and r["world_size"] == 2]
    assert all(c["passed"] is not False for c in zero2["checks"])  # no check failed, the rank is named
    found = zero2["straggler"]
    assert found["rank"] == 1 and found["measure"] == "optimizer"
    # it sleeps 1 s before every optimizer step; DeepSpeed's all-gather after the step, where the
    # other rank waits for it, is outside the measure
    assert 0.9 < found["cost_sec_per_step"] < 1.2
    assert found["cost_fraction_of_step"] > 0.5
    (healthy,) = [r for r in saved_results(bench.path) if r["strategy"] == "zero2" and r["world_size"] == 1]
    assert healthy["straggler"] is None  # one rank
    report = write_report(bench.path / "results", tmp_path, plots=False).markdown.read_text()
    assert "## Stragglers" in report
    (row,) = [
        line for line in report.splitlines() if line.startswith("| zero2") and "held the others back" in line
    ]
    assert "| 1 " in row and "optimizer" in row and "of a step" in row


@pytest.fixture
def warm_matrix(shared_bench):
    return warm_matrix_session(shared_bench)


@pytest.mark.xdist_group(WARM)
def test_healthy_two_rank_runs_name_no_straggler(warm_matrix):
    bench, _ = warm_matrix
    healthy = [r for r in saved_results(bench.path) if r["status"] == "ok"]
    assert {r["strategy"] for r in healthy} == {"ddp", "zero1", "fsdp_grad_op", "zero2"}
    for run in healthy:
        found = run["straggler"]
        assert found is not None and found["rank"] is None, (run["strategy"], found)
        assert [m["name"] for m in found["measures"]] == ["optimizer"]  # no profiled steps on a CPU
