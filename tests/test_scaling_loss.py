"""Where a configuration's lost scaling goes (analysis/scaling.lost_time): the step time lost
against linear split by the profiled steps into exposed communication, waiting for the slowest rank
and host work, each less the baseline's own; the scaling check and the report name the part that
explains most, where the data shows it, and say nothing of a cause where nothing was profiled."""

from __future__ import annotations

import pytest

from llmbench_pytest.analysis.scaling import lost_time
from llmbench_pytest.checks.scaling import check_scaling, explain_loss


def _run(ws: int, step: float, **comm) -> dict:
    ranks = comm.pop("ranks", None)
    return {
        "strategy": "zero3", "device": "cuda", "world_size": ws, "per_device_batch": 8, "grad_accum": 1,
        "seq_len": 2048, "mean_step_time_sec": step, "tokens_per_sec": ws * 8 * 2048 / step,
        "communication": comm or None,
        "per_rank": [{"profile": {"comm_sec_per_step": c}} for c in ranks or []],
    }  # fmt: skip


def test_the_lost_step_splits_into_exposed_communication_waiting_and_host_work():
    one = _run(1, 0.40, profiled_step_sec=0.40, device_idle_sec_per_step=0.04)
    # at 4 GPUs: profiled steps of 0.50 s, 0.15 s of it exposed collectives, ranks' time in
    # collectives 0.20 and 0.15 s (0.05 s of waiting), 0.05 s of the device idle
    profile = {"profiled_step_sec": 0.50, "comm_exposed_sec_per_step": 0.15, "device_idle_sec_per_step": 0.05}
    links = {"collectives_per_step": 349, "mean_message_bytes": 13.5e6, "link_used": 0.06}
    four = _run(4, 0.50, **profile, **links, ranks=[0.20, 0.15])
    lost = lost_time(four, one)
    assert lost.ideal_sec == pytest.approx(0.40) and lost.lost_sec == pytest.approx(0.10)
    assert lost.waiting_sec == pytest.approx(0.05)
    assert lost.exposed_comm_sec == pytest.approx(0.15 - 0.05)
    assert lost.host_sec == pytest.approx(0.05 - 0.04)
    assert lost.other_sec == pytest.approx(0.10 - 0.10 - 0.05 - 0.01)
    assert lost.main_cause() == "exposed communication"
    text = explain_loss(four, one)
    assert "349 collectives per step of 13.50 MB on average, at 6% of the link's bus bandwidth" in text
    assert "fewer, larger messages would be (bigger buckets)" in text
    failed = check_scaling(four, one, 0.9)
    assert failed.passed is False and "most of it exposed communication" in failed.message


def test_an_unprofiled_run_names_no_cause():
    one, two = _run(1, 0.40), _run(2, 0.50)
    lost = lost_time(two, one)
    assert lost is not None and not lost.profiled and lost.main_cause() is None
    assert explain_loss(two, one) == ""
    failed = check_scaling(two, one, 0.9)
    assert (
        "the profiled steps (on a GPU at 2 ranks and more, or --llmbench-profile) say which" in failed.message
    )


def test_nothing_is_lost_above_linear():
    one, two = _run(1, 0.40), _run(2, 0.38, profiled_step_sec=0.38, comm_exposed_sec_per_step=0.01)
    assert lost_time(two, one).lost_sec < 0 and lost_time(two, one).main_cause() is None
    assert explain_loss(two, one) == ""
