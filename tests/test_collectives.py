"""Communication measured as it ran: the collectives of the profiled steps (kind, bytes, group)
and nccl-tests' bus bandwidth arithmetic. The ZeRO paper's volumes (comm_model.py) assumed every
parameter is communicated, so LoRA, which all-reduces only its adapters' gradients, reported 649 to
3,417 GB/s of bus bandwidth on a 4-GPU NVLink host that carries at most ~350 (issue 41)."""

from __future__ import annotations

import json

import pytest

from conftest import FEW_STEPS, REPO, RUNS
from llmbench_pytest.analysis.collectives import (
    bus_factor,
    busbw_at,
    collectives_in,
    kind_of,
    peak_busbw,
    schedule,
)
from llmbench_pytest.analysis.trace import summarize
from llmbench_pytest.worker import overlap_probe
from llmbench_pytest.worker.overlap_probe import hidden_share


def test_the_share_of_a_collective_compute_hides_is_what_running_both_saved():
    assert hidden_share(10.0, 4.0, 10.0) == 1.0  # both took the longer one's time: all hidden
    assert hidden_share(10.0, 4.0, 14.0) == 0.0  # they took their sum: none
    assert hidden_share(10.0, 4.0, 11.0) == pytest.approx(0.75)
    assert hidden_share(10.0, 4.0, 15.0) == 0.0  # slower than one after the other: clipped to none
    # together faster than the longer train alone is no overlap the timings allow: noise, no share
    assert hidden_share(10.0, 4.0, 9.0) is None and hidden_share(10.0, 4.0, 9.99) is None
    assert hidden_share(0.0, 4.0, 4.0) is None
    # trains of unequal length tell little: no share is recorded, and the scale model assumes none lost
    lopsided = overlap_probe.summarize(1 << 20, [{"compute_s": 0.0006, "comm_s": 0.018, "both_s": 0.0186}])
    assert lopsided["hidden_share"] is None and "too unequal" in lopsided["note"]
    even = overlap_probe.summarize(1 << 20, [{"compute_s": 0.012, "comm_s": 0.018, "both_s": 0.024}])
    assert even["hidden_share"] == pytest.approx(0.5) and even["note"] is None
    # a reduce_scatter faster with compute beside it than alone: recorded as noise, not 100% hidden
    faster = overlap_probe.summarize(1 << 20, [{"compute_s": 0.019, "comm_s": 0.016, "both_s": 0.0185}])
    assert faster["hidden_share"] is None and "the timings' noise, no share" in faster["note"]


def test_bus_factors_are_nccl_tests():
    # nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n, broadcast 1
    assert bus_factor("all_reduce", 2) == 1.0 and bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_gather", 4) == 0.75 and bus_factor("reduce_scatter", 4) == 0.75
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("all_reduce", 1) == 0.0


def test_kinds_from_kernel_annotation_and_recorded_names():
    assert kind_of("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096>)") == "all_reduce"
    assert kind_of("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL") == "reduce_scatter"
    assert kind_of("ncclDevKernel_AllGather_RING_LL") == "all_gather"
    assert kind_of("_allgather_base") == "all_gather"
    assert kind_of("reduce_scatter_tensor_coalesced") == "reduce_scatter"
    assert kind_of("all_reduce") == "all_reduce" and kind_of("ncclDevKernel_SendRecv") == "send_recv"
    assert kind_of("coalesced") is None


def _kernel(name: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": args}


def _record(name: str, ts: float, **args) -> dict:
    args = {"Collective name": name, **args}
    return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": ts, "dur": 1.0, "args": args}


def _meta(inputs: int, outputs: int, dtype: str = "BFloat16", group: int = 4) -> dict:
    return {"In msg nelems": inputs, "Out msg nelems": outputs, "dtype": dtype, "Group size": group}


def test_nccl_kernels_with_metadata_give_sizes_as_nccl_tests_defines_them():
    events = [
        # an all-gather of 1 MiB per rank into 4 MiB; a reduce-scatter of 4 MiB into 1 MiB each
        _kernel("ncclDevKernel_AllGather_RING_LL", 0, 100, **_meta(2**19, 2**21)),
        _kernel("ncclDevKernel_ReduceScatter_Sum_bf16", 200, 100, **_meta(2**21, 2**19)),
        _kernel("ncclDevKernel_AllReduce_Sum_bf16", 400, 50, **_meta(2**20, 2**20)),
    ]
    ran = collectives_in(events, "cuda", 4)
    assert [c.kind for c in ran] == ["all_gather", "reduce_scatter", "all_reduce"]
    assert [c.size_bytes for c in ran] == [4 * 2**20, 4 * 2**20, 2 * 2**20]
    assert [c.bus_bytes for c in ran] == [3 * 2**20, 3 * 2**20, 3 * 2**20]
    assert ran[0].seconds == pytest.approx(100e-6)


def test_kernels_without_metadata_take_the_hosts_records_in_order_and_keep_their_time():
    kernels = [_kernel("ncclDevKernel_AllReduce_Sum_f32", 10 * i, 5) for i in range(3)]
    records = [
        _record("allreduce", 10 * i - 1, **_meta(1000 * (i + 1), 1000 * (i + 1), "Float", 2))
        for i in range(3)
    ]
    ran = collectives_in(kernels + records, "cuda", 2)
    assert [c.size_bytes for c in ran] == [4000, 8000, 12000] and all(
        c.seconds == pytest.approx(5e-6) for c in ran
    )
    # a collective whose size nobody recorded: the step's volume is not known, rather than undercounted
    trace = {"traceEvents": [*kernels, _kernel("ncclDevKernel_AllGather_RING_LL", 100, 5)]}
    assert summarize(trace, 1, "cuda", 2).bus_bytes_per_step is None


def test_schedule_groups_identical_collectives_per_step():
    events = [_kernel("ncclDevKernel_AllGather_RING_LL", 10 * i, 5, **_meta(256, 1024)) for i in range(6)]
    (row,) = schedule(collectives_in(events, "cuda", 4), steps=2)
    assert row["kind"] == "all_gather" and row["count_per_step"] == 3 and row["size_bytes"] == 2048
    assert row["bus_bytes_per_step"] == 3 * 2048 * 0.75 and row["kernel_sec_per_step"] == pytest.approx(15e-6)


def _sizes(*pairs: tuple[int, float]) -> list[dict]:
    return [{"bytes": b, "busbw_gbps": g} for b, g in pairs]


LINK = {
    "all_reduce": {
        "latency_us": 20.0,
        "peak_busbw_gbps": 350.0,
        "sizes": _sizes((2**20, 27.6), (2**26, 310.0), (2**30, 350.0)),
    },
    "all_gather": {"latency_us": 18.0, "peak_busbw_gbps": 341.0, "sizes": _sizes((2**30, 341.0))},
}


def test_the_links_busbw_at_a_message_size_interpolates_on_a_log_scale():
    assert busbw_at(LINK, "all_reduce", 2**20) == 27.6 and busbw_at(LINK, "all_reduce", 2**31) == 350.0
    assert busbw_at(LINK, "all_reduce", 2**23) == pytest.approx(27.6 + 0.5 * (310.0 - 27.6))
    assert busbw_at(LINK, "all_reduce", 1) == 27.6 and busbw_at(LINK, "reduce_scatter", 2**20) is None
    assert peak_busbw(LINK) == 350.0 and peak_busbw(None) is None


LORA = "lora_two_ranks"


@pytest.fixture(scope="module")
def lora_two_ranks(shared_bench):
    """LoRA under DDP at two ranks, profiled: DDP all-reduces the adapters' gradients only."""
    bench = shared_bench(LORA)
    name = "test_finetune_lora.py"
    (bench.path / "benchmarks" / name).write_text((REPO / "benchmarks" / name).read_text())
    result = bench.runpytest_subprocess(
        "benchmarks/test_finetune_lora.py", *FEW_STEPS, "--llmbench-strategies=ddp",
        "--llmbench-world-sizes=2", "--llmbench-profile",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    (path,) = bench.path.glob(f"{RUNS}/*_results/result.json")
    return json.loads(path.read_text())


@pytest.mark.xdist_group(LORA)
def test_lora_communicates_its_adapters_not_the_model(lora_two_ranks):
    run = lora_two_ranks
    comm = run["communication"]
    assert comm["bus_bytes_source"] == "measured"
    # fp32 gradients of the trainable adapters, all-reduced over two ranks (bus factor 1), and
    # DDP's broadcast of buffers: nowhere near the 4 bytes x every parameter the model assumed
    adapters = run["trainable_params"] * 4
    assert adapters <= comm["bus_bytes_per_step"] < adapters * 1.05, (comm["bus_bytes_per_step"], adapters)
    assert comm["predicted_bus_bytes_per_step"] > 10 * comm["bus_bytes_per_step"]
    kinds = {row["kind"] for row in comm["schedule"]}
    assert "all_reduce" in kinds and comm["mean_message_bytes"] > 0
    # the shares are of the profiled steps themselves: never above the whole
    assert 0 < comm["comm_fraction_of_step"] <= 1


@pytest.mark.xdist_group(LORA)
def test_the_link_is_measured_once_per_group_and_recorded(lora_two_ranks):
    link = lora_two_ranks["link"]
    assert link["world_size"] == 2 and link["dtype"] == "bf16"
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        table = link[kind]
        assert table["latency_us"] > 0 and table["peak_busbw_gbps"] > 0
        for row in table["sizes"]:
            # busbw = S / t x the bus factor, as nccl-tests prints it
            assert row["busbw_gbps"] == pytest.approx(
                row["bytes"] / (row["time_us"] * 1e-6) / 1e9 * bus_factor(kind, 2)
            )
        # how much of each kind's time compute beside it hid, from the recorded means
        o = link["overlap"][kind]
        assert o["bytes"] > 0 and min(o["compute_ms"], o["comm_ms"], o["both_ms"]) > 0
        if o["hidden_share"] is not None:  # None: the two trains came out too unequal to tell
            assert 0 <= o["hidden_share"] <= 1
            assert o["hidden_share"] == pytest.approx(
                hidden_share(o["compute_ms"], o["comm_ms"], o["both_ms"])
            )
    # and no achieved figure above the link's peak is recorded as a bandwidth
    comm = lora_two_ranks["communication"]
    assert comm["bus_gbps"] is None or comm["bus_gbps"] <= peak_busbw(link)
