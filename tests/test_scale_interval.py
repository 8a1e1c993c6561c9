"""Scale on paper's 90% intervals and the parts they rest on, against hand-computed cases: the slowest
of N ranks (plan/slowest_rank.py), NCCL's latency model (plan/nccl_latency.py), the interval's
arithmetic (plan/interval.py); and the inputs `llmbench scale` refuses or names."""

from __future__ import annotations

import json
import math
import re
import statistics

import pytest
from test_report import llmbench, make_result, write_run
from test_scale import NODE, RUN, SWEEP

from llmbench_pytest.plan import nccl_latency, slowest_rank
from llmbench_pytest.plan.interval import (
    Calibration,
    ModelError,
    band_text,
    bounds,
    doublings,
    host_per_step,
    quantile,
    step_cv,
)
from llmbench_pytest.plan.network import Fabric, network
from llmbench_pytest.plan.scale import predict_config


def test_the_slowest_of_n_ranks_is_the_expected_maximum_of_n_draws():
    # 1, 2, 3: the largest of two draws is 1 with 1/9, 2 with 3/9, 3 with 5/9
    assert slowest_rank.expected_max([1, 2, 3], 2) == pytest.approx((1 + 6 + 15) / 9)
    assert slowest_rank.expected_max([3, 1, 2], 1) == pytest.approx(2.0)  # one rank: the mean
    assert slowest_rank.expected_max([1, 2, 3], 1000) == pytest.approx(
        3.0, abs=1e-6
    )  # saturates at the largest
    # a run's slow drift is the host's, shared by its ranks: only each step's own departure counts
    drifting = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]  # a straight ramp: no step departs from its neighbours
    assert slowest_rank.wait_sec(drifting, 8) == pytest.approx(0.0, abs=1e-12)
    steps = [1.0, 1.2] * 10  # every other step 0.2 s longer: each departs 0.1 s from the four around it
    own = slowest_rank.jitter(steps)
    assert len(own) == 16 and own[:2] == pytest.approx([1.1 - 0.1, 1.1 + 0.1])
    # from a 2-rank run the slowest of 8 is the largest of 4 of its (already slowest-of-2) steps
    assert slowest_rank.wait_sec(steps, 8, 2) == pytest.approx(slowest_rank.expected_max(own, 4) - 1.1)
    assert slowest_rank.wait_sec(None, 8) == slowest_rank.wait_sec([1.0, 2.0], 8) == 0.0


def test_a_step_of_n_ranks_waits_for_the_slowest_in_the_prediction():
    steps = [0.28, 0.32] * 10
    jittery = {**RUN, "step_times_sec": steps}
    plain = {p.world_size: p.step_sec for p in predict_config("zero2", [RUN], [2, 8], NODE).predictions}
    waits = {p.world_size: p.step_sec for p in predict_config("zero2", [jittery], [2, 8], NODE).predictions}
    for n in (2, 8):
        assert waits[n] - plain[n] == pytest.approx(slowest_rank.wait_sec(steps, n))
    assert 0 < waits[2] - plain[2] < waits[8] - plain[8]


def test_nccls_latency_rings_for_gathers_and_scatters_and_a_tree_for_all_reduce():
    # tuning.cc, Simple protocol: 16 GPUs on 2 nodes
    assert nccl_latency.ring_us("all_gather", 16, 2) == pytest.approx(8.4 + 14 * 3.4 + 1 * 14)
    assert nccl_latency.ring_us("all_reduce", 16, 2) == pytest.approx(8.4 + 28 * 3.4 + 2 * 14)
    assert nccl_latency.tree_us(16, 2) == pytest.approx(8.4 + 2 * (7 * 4.0 + 1 * 14))
    assert nccl_latency.latency_us("all_reduce", 16, 2) == nccl_latency.tree_us(16, 2)
    assert nccl_latency.latency_us("reduce_scatter", 16, 2) == nccl_latency.ring_us("reduce_scatter", 16, 2)
    # a ring's latency grows with the ranks, a tree's with the log of the nodes
    ring = [nccl_latency.latency_us("all_gather", 8 * k, k) for k in (2, 16, 128)]
    tree = [nccl_latency.latency_us("all_reduce", 8 * k, k) for k in (2, 16, 128)]
    assert ring[2] / ring[0] > 50 and tree[2] / tree[0] < 4
    assert nccl_latency.latency_us("all_gather", 1, 1) == 0.0


def test_the_interval_adds_its_parts_in_quadrature_and_the_assumptions_at_their_ends():
    assert quantile([3, 1, 2, 4], 0.5) == pytest.approx(2.5)
    assert quantile(list(range(21)), 0.05) == pytest.approx(1.0)
    error = ModelError(low=-0.02, mid=0.01, high=0.05, count=30)
    # one doubling, no other spread: the model's own quantiles around the point
    assert bounds(1.0, 1.0, error, 1, 0.0) == pytest.approx((math.exp(-0.02), math.exp(0.05)))
    # four doublings: the median four times, the spread twice
    low, high = bounds(1.0, 1.0, error, 4, 0.0)
    assert low == pytest.approx(math.exp(0.04 - 0.06)) and high == pytest.approx(math.exp(0.04 + 0.08))
    # an SD of 2% beside it: 1.645 x 2% in quadrature on each side
    low, high = bounds(1.0, 1.0, error, 1, 0.02)
    assert low == pytest.approx(math.exp(0.01 - math.hypot(0.03, 1.6449 * 0.02)))
    # the assumptions' ends bound it linearly
    assert bounds(0.9, 1.2, None, 3, 0.0) == pytest.approx((0.9, 1.2))
    assert doublings(64, [1, 2, 4]) == pytest.approx(4.0) and doublings(2, [1, 2]) == 0.0


def test_the_band_text_is_computed_from_the_validation_figures():
    doc = {
        "date": "2026-11-28",
        "check": {"method": "leave one out", "sessions": 3, "devices": "H200", "inside": 9,
                  "predictions": 10, "median_width": 0.123, "steady": None,
                  "unseen_model": {"models": 4, "inside": 19, "predictions": 20, "median_width": 0.3}},
        "published": {"points": 12, "inside": 11, "within_5pt": 10},
    }  # fmt: skip
    text = band_text(doc)
    assert "inside its interval for 9 of 10 predictions (90%), median width 12.3%" in text
    assert "for a model those sessions never ran (each of their 4 models checked with the others' " in text
    assert "inside for 19 of 20 (95%), median width 30.0%" in text
    assert (
        "12 published multi-node runs: inside the interval 11, point within 5 points of efficiency 10" in text
    )
    assert band_text({}).startswith("no validation kept")


def test_a_configuration_never_seen_takes_the_host_spread_its_own_steps_show():
    """Its class's median where its steps are as steady as the class's; where its own steps vary more
    (a host-bound step), their CV times the kept ratio of host-to-host spread to step CV."""
    doc = {
        "host_cv": {"ddp llama-1b seq2048 b8x1 | H200": {"cv": 0.012, "sessions": 8}},
        "class_host_cv": {"steady": 0.016},
        "host_per_step": 1.2,
    }
    cal = Calibration(doc)
    assert cal.host_cv("ddp llama-1b seq2048 b8x1", "H200", "steady", own_step_cv=0.5) == 0.012  # seen
    assert cal.host_cv("ddp gpt2 seq1024 b16x1", "H200", "steady", own_step_cv=0.005) == 0.016
    assert cal.host_cv("ddp encdec-50m seq256 b64x1", "H200", "steady", own_step_cv=0.1) == pytest.approx(
        0.12
    )
    # the ratio is the median over the configurations seen often enough of host spread / step CV
    host = {"a": {"cv": 0.02, "sessions": 3}, "b": {"cv": 0.2, "sessions": 5},
            "c": {"cv": 0.1, "sessions": 4}, "d": {"cv": 0.9, "sessions": 2}}  # fmt: skip
    steps = {"a": [0.01, 0.01, 0.02], "b": [0.1, 0.2, 0.1], "c": [0.1], "d": [0.1]}
    assert host_per_step(host, steps) == pytest.approx(statistics.median([2.0, 2.0, 1.0]))
    assert step_cv({"step_cv_in_run": 0.07}) == 0.07
    assert step_cv({"step_times_sec": [1.0, 1.0, 1.3, 0.7]}) == pytest.approx(
        statistics.stdev([1, 1, 1.3, 0.7])
    )


def test_every_predicted_row_carries_an_interval_around_its_point_wider_past_the_node():
    gbytes, latency, _ = network("400G", None, None)
    fabric = Fabric(SWEEP, 8, gbytes, latency, nic_efficiency=0.9)
    errors = {"from_smallest": {"steady": [0.0, 0.01, -0.01, 0.02, 0.03, -0.02, 0.01, 0.0]}}
    cal = Calibration({"errors": errors, "class_host_cv": {"steady": 0.01}})
    scale = predict_config("zero2", [RUN], [2, 8, 64, 1024], fabric, cal)
    rows = {p.world_size: p for p in scale.predictions}
    assert rows[1].measured and rows[1].step_low is None
    widths = []
    for n in (2, 8, 64, 1024):
        p = rows[n]
        assert p.step_low < p.step_sec < p.step_high
        low, high = p.efficiency_interval
        assert low < p.efficiency < high
        widths.append((p.step_high - p.step_low) / p.step_sec)
        assert p.to_dict()["interval_90"]["step_sec"] == [p.step_low, p.step_high]
    assert widths == sorted(widths) and widths[-1] > 2.5 * widths[0]


def _session(root, step_ws1=0.30, corrupt: bool = False):
    link = {"world_size": 2, **{k: v for k, v in SWEEP.items() if k != "world_size"}}
    for ws, step in ((1, step_ws1), (2, 0.31)):
        r = make_result("fsdp", ws=ws, step=step) | {"link": link}
        path = write_run(root, r)
        if corrupt and ws == 1:
            path.write_text(path.read_text()[:300])
    return root


def test_the_gpus_of_a_node_must_be_one_or_more_and_the_refusal_names_the_fix(tmp_path):
    root = _session(tmp_path / "runs")
    done = llmbench("scale", root, "--gpus-per-node", "0", "--json", tmp_path / "s.json")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "llmbench scale: error: --gpus-per-node 0: a node holds 1 or more GPUs; give the count of yours "
        "(e.g. --gpus-per-node 8), or leave it out for the measured host's"
    )
    done = llmbench(
        "scale", root, "--network-gbps", "400", "--world-sizes", "64", "--json", tmp_path / "s.json"
    )
    assert done.returncode == 2 and "it is GB/s (gigabytes) of bus bandwidth" in done.stderr


def test_a_corrupted_result_is_named_and_the_configuration_it_leaves_says_so(tmp_path):
    root = _session(tmp_path / "runs", corrupt=True)
    out = tmp_path / "s.json"
    done = llmbench("scale", root, "--world-sizes", "4", "--json", out)
    assert done.returncode == 0, done.stderr
    assert "llmbench scale: warning: " in done.stderr and "truncated" in done.stderr
    assert "left out, unreadable: " in done.stdout and "its smallest readable run is at 2 GPUs" in done.stdout
    doc = json.loads(out.read_text())
    assert len(doc["unreadable_results"]) == 1 and "bench-h-fsdp-ws1" in doc["unreadable_results"][0]
    (config,) = doc["configurations"]
    four = next(p for p in config["predictions"] if p["world_size"] == 4)
    low, high = four["interval_90"]["tokens_per_sec"]
    assert low < four["tokens_per_sec"] < high


def test_the_reports_section_gives_every_predicted_cell_its_interval(tmp_path):
    from llmbench_pytest.report.collect import load_results
    from llmbench_pytest.report.summary import markdown_scale

    lines = markdown_scale.render(load_results(_session(tmp_path / "runs")).runs, tmp_path)
    text = "\n".join(lines)
    assert "## Beyond this node" in text and "What the intervals are known to: 90% intervals checked" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| fsdp")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    for cell in cells[1:6]:  # 4 to 256 GPUs: 'tokens/s (eff), low-high'
        point, low, high = (float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?=\s\(|-|$)", cell))
        assert low < point < high, cell
    doc = json.loads((tmp_path / "scale.json").read_text())
    assert all(p["interval_90"] for c in doc["configurations"] for p in c["predictions"] if not p["measured"])
