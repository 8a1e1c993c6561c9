"""Scale on paper (plan/scale.py, plan/network.py, `llmbench scale`): a configuration's step at more
GPUs from its measured parts. The arithmetic against hand-computed cases; the CLI's refusals; and a
CPU session at one and two ranks that gives a prediction (smoke: no accuracy claim on a CPU; the
GPU validation is docs/results/2026-11-27-h200x2-many-gpus, tools/scale_validation.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_readme_commands import FIRST_RUN, first_run  # noqa: F401 (the README's first run, shared)
from test_report import make_result, write_run

from llmbench_pytest.plan.network import HIDDEN_ASSUMED, NIC_EFFICIENCY, Fabric, network
from llmbench_pytest.plan.scale import predict_config
from llmbench_pytest.plan.step_model import Coll, bus_bytes, exposed_sec, optimizer_share, schedule
from llmbench_pytest.report.collect import load_results
from llmbench_pytest.report.scaling import group

GIB = 2**30


def _kind(latency_us: float, busbw: float) -> dict:
    return {
        "latency_us": latency_us,
        "peak_busbw_gbps": busbw,
        "sizes": [{"bytes": GIB, "busbw_gbps": busbw}],
    }


SWEEP = {
    "world_size": 2,
    "all_reduce": _kind(20.0, 300.0),
    "all_gather": _kind(20.0, 250.0),
    "reduce_scatter": _kind(20.0, 250.0),
}
NODE = Fabric(SWEEP, gpus_per_node=8)


def test_a_ring_all_reduce_inside_a_node_takes_s_times_its_bus_factor_over_busbw():
    # 1 GiB over 8 GPUs: S x 2(n-1)/n / busbw = 2**30 x 1.75 / 300e9
    assert NODE.seconds("all_reduce", GIB, 8) == pytest.approx(GIB * 1.75 / 300e9)
    assert NODE.seconds("all_gather", GIB, 4) == pytest.approx(GIB * 0.75 / 250e9)
    assert NODE.seconds("all_reduce", GIB, 1) == 0.0  # one GPU moves nothing
    assert NODE.seconds("all_reduce", 1024, 2) == pytest.approx(20e-6)  # a tiny message: its latency


def test_across_nodes_the_nodes_nics_bound_the_bus_and_nccls_latency_model_adds_its_steps():
    gbytes, latency, _ = network("400G", None, None)
    assert gbytes == pytest.approx(400 / 8 * NIC_EFFICIENCY) and latency == 14.0  # NCCL's Simple constant
    fabric = Fabric(SWEEP, 8, gbytes, latency)
    # 64 GPUs = 8 nodes. All-reduce: a tree, 8.4 + 2 x ((8 - 1) x 4.0 + log2(8) x 14) = 148.4 us; the
    # bus at the node's eight NICs together (8 x 45 = 360 GB/s), above the node's 300: the node's
    expected = GIB * 2 * 63 / 64 / 300e9 + 148.4e-6
    assert fabric.seconds("all_reduce", GIB, 64) == pytest.approx(expected)
    # all-gather: a ring, 8.4 + (63 - 7) x 3.4 + 7 x 14 = 296.8 us, its bus at the NICs (8 x 10 GB/s)
    slow = Fabric(SWEEP, 8, 10.0, latency)
    assert slow.seconds("all_gather", GIB, 64) == pytest.approx(GIB * 63 / 64 / 80e9 + 296.8e-6)
    with pytest.raises(ValueError, match="name the network"):
        NODE.seconds("all_reduce", GIB, 16)
    assert network("2x400G", None, None)[0] == pytest.approx(2 * gbytes)
    assert network(None, 30.0, 2.0) == (30.0, 2.0, "30 GB/s of busbw per GPU (given)")
    with pytest.raises(ValueError, match="--network '300G'"):
        network("300G", None, None)


def test_overlap_hides_what_compute_can_and_never_the_tail_or_the_waited_latency():
    whole = Fabric({**SWEEP, "overlap": {k: {"hidden_share": 1.0} for k in ("all_reduce", "all_gather")}}, 8)
    t = whole.seconds("all_reduce", GIB, 2)  # 2**30 x 1 / 300e9 = 3.58 ms
    hidden = [Coll("all_reduce", GIB, 4, 2 / 3)]
    # 4 of them under 1 s of compute (0.667 s of backward): all hidden but the last
    assert exposed_sec(hidden, 2, 1.0, whole) == pytest.approx((4 * t, t))
    # under 6 ms of compute (4 ms of backward): what backward cannot hide shows
    assert exposed_sec(hidden, 2, 0.006, whole)[1] == pytest.approx(4 * t - 0.004)
    after = [Coll("all_gather", GIB, 1, 0.0)]  # ZeRO-1/2's gather after the step: all exposed
    assert exposed_sec(after, 2, 10.0, whole)[1] == pytest.approx(whole.seconds("all_gather", GIB, 2))
    waited = [Coll("all_gather", 1024, 100, 1.0, waited=True)]  # each one's latency on the path
    assert exposed_sec(waited, 2, 10.0, whole)[1] == pytest.approx(100 * 20e-6 + 20e-6)


def test_compute_beside_a_collective_hides_only_the_share_the_probe_saw_it_hide():
    quarter = {"all_reduce": {"hidden_share": 0.25}}
    contended = Fabric({**SWEEP, "overlap": quarter}, gpus_per_node=8)
    t = NODE.seconds("all_reduce", GIB, 2)
    hidden = [Coll("all_reduce", GIB, 4, 2 / 3)]
    # the tail is bare as before; the three under backward cost the 75% the probe saw compute not hide
    assert exposed_sec(hidden, 2, 1.0, contended) == pytest.approx((4 * t, t + 3 * t * 0.75))
    assert contended.hidden_share("all_gather") == 0.25  # a kind the probe did not measure: the others'
    assert contended.overlap_text().endswith(
        "compute hides 25% of an all_reduce (measured by the link probe)"
    )
    # no probe share at all: assumed, and said so
    assert "hides 50% of each (assumed" in NODE.overlap_text()
    assert exposed_sec(hidden, 2, 1.0, NODE)[1] == pytest.approx(t + 3 * t * HIDDEN_ASSUMED)


RUN = {
    "strategy": "zero2", "offload": "none", "dtype": "bf16", "world_size": 1, "status": "ok",
    "params": 1_000_000_000, "per_device_batch": 8, "grad_accum": 1, "seq_len": 2048,
    "mean_step_time_sec": 0.300, "optimizer_step_sec": 0.050, "tokens_per_sec": 8 * 2048 / 0.300,
    "model_info": {"hidden_size": 2048, "layers": 16},
    "strategy_config": {"deepspeed_config": {"zero_optimization": {"reduce_bucket_size": 4_194_304}}},
}  # fmt: skip


def test_zero2s_schedule_moves_the_zero_paper_volume_and_its_step_is_hand_computable():
    colls = schedule(RUN)
    # gradients all-reduced in buckets (bf16), the updated parameters gathered once
    assert bus_bytes(colls, 2) == pytest.approx(1e9 * 2 * 1 + 1e9 * 2 * 0.5)
    (p2,) = [p for p in predict_config("zero2", [RUN], [2], NODE).predictions if p.world_size == 2]
    buckets = colls[0].count
    reduce_t = NODE.seconds("all_reduce", colls[0].size_bytes, 2)
    gather_t = NODE.seconds("all_gather", 2e9, 2)
    # compute 0.25 s; optimizer 0.05 / 2; the buckets hide under backward but the last, each waited,
    # and cost compute beside them half their time (no probe share: HIDDEN_ASSUMED)
    hidden = (buckets - 1) * reduce_t * (1 - HIDDEN_ASSUMED)
    expected = 0.25 + 0.025 + gather_t + reduce_t + buckets * 20e-6 + hidden
    assert p2.step_sec == pytest.approx(expected)
    assert p2.efficiency == pytest.approx(0.300 / expected)
    assert optimizer_share("ddp", "none", 8, 8) == 1.0 and optimizer_share("zero2", "cpu", 16, 8) == 0.5


def test_a_step_that_waits_for_gathers_gets_its_class_and_a_flag_saying_why_its_interval_is_wide():
    zero3 = {**RUN, "strategy": "zero3", "gpu_util_pct": 60.0}  # busy 0.6 x 0.3 / 0.25 = 72% of fwd+bwd
    scale = predict_config("zero3", [zero3], [2], NODE)
    assert scale.klass == "gathers" and len(scale.flags) == 1
    assert "host-bound: the GPU was busy 72%" in scale.flags[0]
    assert "kept predictions of such steps one doubling on came out" in scale.flags[0]
    # GPU-bound, but ZeRO-3 waits for a gather every 0.6 ms (477 in 0.3 s): flagged for that
    (dense,) = predict_config("zero3", [{**zero3, "gpu_util_pct": 95.0}], [2], NODE).flags
    assert "dense gathers: the step waits for a parameter gather every 0.6 ms" in dense
    # FSDP's 32 gathers in 0.3 s (one every 9.4 ms) on a GPU-bound step, ZeRO-2 (no gather waited
    # for), or ZeRO-3 with no utilisation recorded and gathers far apart: steady, no flag
    fsdp = {**RUN, "strategy": "fsdp", "gpu_util_pct": 95.0}
    assert not predict_config("fsdp", [fsdp], [2], NODE).flags
    assert predict_config("fsdp", [{**fsdp, "gpu_util_pct": 60.0}], [2], NODE).flags  # host-bound
    assert predict_config("zero2", [{**RUN, "gpu_util_pct": 30.0}], [2], NODE).klass == "steady"
    sparse = {**RUN, "strategy": "zero3", "mean_step_time_sec": 3.0, "tokens_per_sec": 8 * 2048 / 3.0}
    assert not predict_config("zero3", [sparse], [2], NODE).flags
    # a CPU run's dense gathers are not the GPU's figures: no flag
    assert not predict_config("zero3", [{**zero3, "gpu_util_pct": None, "device": "cpu"}], [2], NODE).flags
    # a measured 2-GPU run anchors the prediction: its miss is carried instead, the class stays
    two = {**zero3, "world_size": 2, "mean_step_time_sec": 0.31}
    anchored = predict_config("zero3", [zero3, two], [4], NODE)
    assert not any("host-bound" in f for f in anchored.flags) and anchored.klass == "gathers"

    # and its interval is wider than a steady step's
    def width(s):
        p = next(p for p in s.predictions if p.world_size == 2)
        return (p.step_high - p.step_low) / p.step_sec

    assert width(scale) > 2 * width(predict_config("fsdp", [fsdp], [2], NODE))


def test_a_measured_larger_world_size_anchors_the_prediction_and_a_big_miss_is_flagged():
    two = {**RUN, "world_size": 2, "mean_step_time_sec": 0.360}  # 20% slower than the model says
    scale = predict_config("zero2", [RUN, two], [4, 8], NODE)
    assert scale.anchor is two and scale.miss == pytest.approx(-0.2, abs=0.03)
    assert any("misses the measured 2 GPUs" in f for f in scale.flags)
    alone = {p.world_size: p for p in predict_config("zero2", [RUN], [4], NODE).predictions}
    anchored = {p.world_size: p for p in scale.predictions}
    # the measured miss at 2 GPUs is carried to 4
    residual = 0.360 - predict_config("zero2", [RUN], [2], NODE).predictions[1].step_sec
    assert anchored[4].step_sec == pytest.approx(alone[4].step_sec + residual)
    assert anchored[2].measured and anchored[4].assumed == ["link busbw measured at 2 GPUs holds for 4"]


def test_a_prediction_from_steps_known_only_loosely_is_flagged_with_their_precision():
    loose = {**RUN, "step_time_mean_interval": {"relative": 0.078}}
    two = {**RUN, "world_size": 2, "mean_step_time_sec": 0.30, "step_time_mean_interval": {"relative": 0.096}}
    flags = predict_config("zero2", [loose, two], [4], NODE).flags
    assert any("known only to +-7.8% at 1 GPU, +-9.6% at 2 GPUs" in f for f in flags)
    # one loose run is named alone; steps known to 5% or better, or with no interval, raise nothing
    tight = {**two, "step_time_mean_interval": {"relative": 0.02}}
    flags = predict_config("zero2", [loose, tight], [4], NODE).flags
    assert any("known only to +-7.8% at 1 GPU (" in f for f in flags)
    exact = {**RUN, "step_time_mean_interval": {"relative": 0.05}}
    assert not any("known only" in f for f in predict_config("zero2", [exact, tight], [4], NODE).flags)


@pytest.mark.xdist_group(FIRST_RUN)
def test_a_cpu_session_gives_code_path_smoke_and_no_gpu_figure(first_run, tmp_path):  # noqa: F811
    bench, _ = first_run
    out = tmp_path / "scale.json"
    cmd = [sys.executable, "-m", "llmbench_pytest.cli", "scale", str(bench.path / "results" / "latest")]
    done = subprocess.run([*cmd, "--world-sizes", "4,8", "--json", str(out)], capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "link inside a node: measured by the session's probe at 2 ranks" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["link"]["source"] == "measured (link probe)" and doc["network"] is None
    for config in doc["configurations"]:
        sizes = {p["world_size"]: p for p in config["predictions"]}
        assert sizes[1]["measured"] and sizes[2]["measured"] and not sizes[8]["measured"]
        assert sizes[8]["tokens_per_sec"] > 0 and sizes[8]["step_sec"] > 0
    # CPU ranks: code-path smoke, no GPU figure, and never past one node
    assert done.stdout.startswith("CPU smoke: these runs ran on CPU ranks over gloo")
    assert "tokens/s" not in done.stdout and doc["cpu_smoke"].startswith("CPU smoke")
    assert doc["world_size_unit"] == "CPU ranks"
    beyond = subprocess.run(
        [*cmd, "--world-sizes", "64"], capture_output=True, text=True, check=False, timeout=120
    )
    assert beyond.returncode == 2 and "name the network between them (--network 400G" in beyond.stderr


def test_configurations_a_short_name_cannot_tell_apart_each_keep_their_own_runs(tmp_path):
    """The LoRA diagnostic's rank and fp16 variants share the plain LoRA run's short name (strategy,
    model, sequence, batch, workload): each must stay a configuration of its own in `llmbench scale`
    and tools/scale_validation.py, not be dropped or predicted from another's runs, and be named
    alike whatever else its folder holds (kept predictions are matched by name across folders)."""
    variants = {"plain": ("bf16", 16), "fp16": ("fp16", 16), "rank": ("bf16", 8)}
    for variant, (dtype, rank) in variants.items():
        for ws, step in ((1, 0.30), (2, 0.31)):
            r = make_result("ddp", ws=ws, step=step * (2 if dtype == "fp16" else 1))
            r |= {"workload": "lora", "dtype": dtype, "lora_rank": rank}
            write_run(tmp_path / "all" / variant, r)
            if variant == "plain":
                write_run(tmp_path / "plain-alone", r)
    write_run(tmp_path / "all" / "other", make_result("zero2", ws=1))
    write_run(tmp_path / "all" / "other2", make_result("zero2", ws=2))
    groups = group(load_results(tmp_path / "all").runs)
    base = "ddp llama-tiny seq128 b2x1 lora"
    told = [base, f"{base} dtype=fp16", f"{base} lora_rank=8", "zero2 llama-tiny seq128 b2x1"]
    assert sorted(groups) == sorted(told)
    for name, members in groups.items():
        assert [m["world_size"] for m in members] == [1, 2], name
        assert len({(m["dtype"], m.get("lora_rank")) for m in members}) == 1, name
    assert {m["dtype"] for m in groups[f"{base} dtype=fp16"]} == {"fp16"}
    assert {m["lora_rank"] for m in groups[base]} == {16}
    assert list(group(load_results(tmp_path / "plain-alone").runs)) == [base]


def test_one_configuration_on_two_gpu_models_in_one_folder_is_two_named_by_their_gpu(tmp_path):
    for gpu in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        for ws in (1, 2):
            write_run(tmp_path / gpu.split()[-1], make_result("ddp", ws=ws, gpu=gpu))
    groups = group(load_results(tmp_path).runs)
    assert sorted(groups) == [
        "ddp llama-tiny seq128 b2x1 hardware=NVIDIA H100 80GB HBM3",
        "ddp llama-tiny seq128 b2x1 hardware=NVIDIA H200",
    ]
    assert all(len(members) == 2 for members in groups.values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((None, 400.0, None), "--network-gbps 400: it is GB/s (gigabytes) of bus bandwidth a GPU's share"),
        ((None, 0.0, None), "--network-gbps 0: it is GB/s"),
        ((None, 30.0, 0.0), "--network-latency-us 0: give the network's latency a ring step in microseconds"),
        ((None, 30.0, 5000.0), "at most 1000 (NCCL's own figure is 14)"),
        (("3x400G", None, None), "--network '3x400G': one or two NICs a GPU"),
    ],
)
def test_a_network_no_nic_gives_is_refused_in_one_line_with_its_unit(args, message):
    with pytest.raises(ValueError) as err:
        network(*args)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_ends_of_an_interval_take_the_assumptions_published_ranges():
    gbytes, latency, _ = network("400G", None, None)
    fabric = Fabric({**SWEEP, "overlap": {"all_gather": {"hidden_share": 0.5}}}, 8, gbytes, latency,
                    nic_efficiency=NIC_EFFICIENCY)  # fmt: skip
    fast, slow = fabric.corner(slow=False), fabric.corner(slow=True)
    assert fast.network_gbytes == pytest.approx(50 * 0.96) and slow.network_gbytes == pytest.approx(50 * 0.85)
    assert (fast.network_latency_us, slow.network_latency_us) == (4.0, 28.0)
    # overlap none to whole across nodes; a measured share inside the node stays as measured
    assert (fast.hidden_share("all_gather", 64), slow.hidden_share("all_gather", 64)) == (1.0, 0.0)
    assert fast.hidden_share("all_gather", 8) == slow.hidden_share("all_gather", 8) == 0.5
    assert slow.hidden_share("reduce_scatter", 8) == 0.0  # a kind the probe has no share for
    narrow = Fabric(SWEEP, 8, 5.0, latency, nic_efficiency=NIC_EFFICIENCY)  # the NICs below the node's link
    ends = [f.seconds("all_gather", GIB, 64) for f in (narrow.corner(False), narrow, narrow.corner(True))]
    assert ends == sorted(ends) and ends[0] < ends[2]


def test_across_nodes_a_collective_costs_compute_what_its_bytes_cost_at_the_nodes_speed():
    half = {"all_gather": {"hidden_share": 0.5}}
    fabric = Fabric({**SWEEP, "overlap": half}, 8, 1.0, 14.0)
    colls = [Coll("all_gather", GIB, 4, 1.0)]
    t, inside = fabric.seconds("all_gather", GIB, 64), fabric.in_node_seconds("all_gather", GIB, 64)
    assert t > 3 * inside  # the network (8 GB/s a node) is slower than the node's link
    # 10 s of compute hides all but the tail; the three hidden cost half their time at the node's speed,
    # not half of their network time
    assert exposed_sec(colls, 64, 10.0, fabric)[1] == pytest.approx(t + 3 * inside * 0.5)


def test_an_overlap_share_the_timings_do_not_allow_is_noise_not_whole():
    # recorded as 100% hidden before the probe knew better: a reduce_scatter faster beside compute
    # than alone (18.5 ms against 19 ms of compute alone); the share is recomputed and left out
    faster = {"compute_ms": 19.0, "comm_ms": 16.0, "both_ms": 18.5, "hidden_share": 1.0}
    fair = {"compute_ms": 19.0, "comm_ms": 16.0, "both_ms": 27.0, "hidden_share": 0.5}
    fabric = Fabric({**SWEEP, "overlap": {"reduce_scatter": faster, "all_gather": fair}}, 8)
    assert fabric.measured_overlap() == {"all_gather": pytest.approx(0.5)}
    assert fabric.hidden_share("reduce_scatter") == pytest.approx(0.5)  # the measured kinds' mean, not 1
    assert "reduce_scatter ran faster beside compute than alone: noise, not counted" in fabric.overlap_text()
