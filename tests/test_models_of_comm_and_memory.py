"""The analytical communication and memory models, and the trace reader behind the measured side."""

import pytest

from llmbench_pytest.analysis.comm_model import per_step
from llmbench_pytest.analysis.memory_model import InFlight, bytes_per_param, gap, large_params, predicted_gb
from llmbench_pytest.analysis.trace import summarize
from llmbench_pytest.checks import check_timing
from llmbench_pytest.checks.memory import MODEL_STATE_TOLERANCE

P = 1_000_000


def test_zero_paper_volumes():
    # ZeRO paper, section 7: DP and ZeRO-1/2 move 2 Psi per rank, ZeRO-3 3 Psi (ring: x (N-1)/N)
    ring = 7 / 8
    assert per_step("zero2", P, 8, "bf16").bus_bytes == pytest.approx(2 * ring * P * 2)
    assert per_step("zero3", P, 8, "bf16").bus_bytes == pytest.approx(3 * ring * P * 2)
    assert per_step("ddp", P, 8, "bf16").bus_bytes == pytest.approx(2 * ring * P * 4)  # fp32 gradients
    assert per_step("ddp", P, 1, "bf16").bus_bytes == 0  # nothing to talk to
    assert per_step("zero3", P, 2, "bf16", grad_accum=4).bus_bytes == pytest.approx(0.5 * P * 2 * (2 * 4 + 1))


def test_memory_model_is_the_zero_paper_in_mixed_precision():
    assert bytes_per_param("ddp", "none", 4, "bf16") == 16
    assert bytes_per_param("zero1", "none", 4, "bf16") == pytest.approx(4 + 12 / 4)
    assert bytes_per_param("zero2", "none", 4, "bf16") == pytest.approx(2 + 14 / 4)
    assert bytes_per_param("zero3", "none", 4, "bf16") == pytest.approx(16 / 4)
    assert bytes_per_param("fsdp", "none", 4, "bf16") == pytest.approx(16 / 4)
    # ZeRO-3 offload keeps parameters on the host too: on the device only what is in flight
    assert bytes_per_param("zero3", "cpu", 4, "bf16") == 0.0
    assert predicted_gb("ddp", "none", 2, "fp32", 5_261_568) == pytest.approx(16 * 5_261_568 / 1e9)
    assert gap(1.1, 1.0) == pytest.approx(0.1) and gap(None, 1.0) is None


def test_memory_model_matches_what_deepspeed_holds_in_fp32():
    # DeepSpeed keeps an fp32 master partition even for an fp32 model
    assert bytes_per_param("zero2", "none", 2, "fp32") == pytest.approx(12.0)
    assert bytes_per_param("zero3", "none", 2, "fp32") == pytest.approx(10.0)


TINY = 5_261_568  # a small llama (vocab 4096 x hidden 256), DeepSpeed's bucket 256 x 256
TINY_FLIGHT = InFlight(embedding=4096 * 256, bucket=256 * 256)


@pytest.mark.parametrize(
    ("strategy", "dtype", "measured"),
    [
        # census at the end of backward, bytes per parameter, CPU at two ranks (fp32 and bf16)
        ("zero1", "fp32", 14.053),
        ("zero2", "fp32", 12.900),
        ("zero3", "fp32", 11.649),
        ("zero1", "bf16", 10.028),
        ("zero2", "bf16", 9.452),
        ("zero3", "bf16", 8.826),
    ],
)
def test_what_deepspeed_still_holds_when_autograd_returns(strategy, dtype, measured):
    # the bucket it was filling, the input embedding's gradient (reduced in its epilogue) and,
    # at ZeRO-3, that embedding's gathered weights
    predicted = predicted_gb(strategy, "none", 2, dtype, TINY, inflight=TINY_FLIGHT, device="cpu")
    assert measured * TINY / 1e9 == pytest.approx(predicted, rel=0.01)


LLAMA_1B = 953_223_168


LLAMA_1B_INFO = {"params": LLAMA_1B, "layers": 16, "hidden_size": 2048, "heads": 32, "head_dim": 64,
                 "vocab_size": 32000}  # fmt: skip
"""model_info as worker/models.py records it for llama-1b (docs/results/2026-11-22-h200x2-llama-1b)."""
GPU_ZERO = {"reduce_bucket_size": 2048**2, "overlap_comm": True}
"""worker/strategies/deepspeed_zero.build_config's zero_optimization on a GPU, for llama-1b."""


def test_tensors_larger_than_a_bucket_are_counted_from_the_shapes_or_taken_as_recorded():
    # llama-1b: 16 x 3 MLP matrices of 2048 x 5632, the embedding and the LM head (32000 x 2048),
    # counted on the meta device; the attention projections (2048 x 2048) fit the bucket
    assert large_params(LLAMA_1B_INFO, 2048**2) == 16 * 3 * 2048 * 5632 + 2 * 32000 * 2048 == 684_720_128
    # a bucket smaller than a projection: only the norms go through it
    assert large_params(LLAMA_1B_INFO, 2048**2 - 1) == LLAMA_1B - 33 * 2048
    assert large_params({"params": LLAMA_1B}, 2048**2) == 0  # shapes not recorded: nothing assumed
    config = {"deepspeed_config": {"zero_optimization": GPU_ZERO}}
    assert InFlight.of(LLAMA_1B_INFO, config).large == 684_720_128
    assert InFlight.of(LLAMA_1B_INFO, {**config, "params_above_bucket": 5}).large == 5


@pytest.mark.parametrize(
    ("world_size", "measured"),
    # census at the end of backward, the rank that holds the most: 1x H100 (2026-11-24) and a
    # 4x H200 host at 2 and 4 GPUs (2026-11-27, issue 41), llama-1b bf16
    [(1, 15.3996), (2, 9.42), (4, 6.42)],
)
def test_zero1_with_overlap_comm_keeps_its_large_gradients_outside_its_partition(world_size, measured):
    flight = InFlight.of(LLAMA_1B_INFO, {"deepspeed_config": {"zero_optimization": GPU_ZERO}})
    zero1 = predicted_gb("zero1", "none", world_size, "bf16", LLAMA_1B, inflight=flight)
    zero2 = predicted_gb("zero2", "none", world_size, "bf16", LLAMA_1B, inflight=flight)
    # what ZeRO-2 holds, plus 2 bytes for each of the 684.7M parameters in gradients larger than a
    # bucket, for the (N-1)/N of them outside this rank's partition
    held = 2 * 684_720_128 * (world_size - 1) / world_size / 1e9
    assert zero1 == pytest.approx(zero2 + held)
    assert zero1 == pytest.approx(measured, rel=0.001)  # 15.3994, 9.4116, 6.4177
    # without the held gradients the prediction misses the measurement beyond the check's 5%
    assert world_size == 1 or measured / zero2 - 1 > MODEL_STATE_TOLERANCE
    # a "zero2" that DeepSpeed runs at stage 1 (LLMBENCH_INJECT_FAULT=zero2:stage=1) holds zero1's
    # states: beyond 5% of zero2's prediction from 2 GPUs on (+7.8% at 2, +19.1% at 4)
    assert world_size == 1 or zero1 / zero2 - 1 > MODEL_STATE_TOLERANCE


def test_zero1_without_overlap_comm_holds_full_gradients_and_offload_none_on_cpu():
    no_overlap = InFlight(embedding=32000 * 2048, bucket=2048**2, large=684_720_128)
    assert predicted_gb("zero1", "none", 2, "bf16", LLAMA_1B, inflight=no_overlap) == pytest.approx(
        ((2 + 2 + 12 / 2) * LLAMA_1B + 2 * 2048**2) / 1e9
    )
    assert predicted_gb("zero2", "cpu", 2, "fp32", TINY, device="cpu") is None
    assert predicted_gb("zero2", "cpu", 2, "bf16", TINY, device="cuda") == pytest.approx(2 * TINY / 1e9)


def test_lora_adapters_come_on_top_of_the_frozen_base():
    # 1x H100, Mistral-7B LoRA r16, bf16, DDP: 14.714 GB measured (paged 8-bit AdamW: 14.633)
    base, adapters = 7_248_023_552, 13_631_488
    assert predicted_gb("ddp", "none", 1, "bf16", base, adapters) == pytest.approx(14.714, abs=0.001)
    eight_bit = predicted_gb("ddp", "none", 1, "bf16", base, adapters, optimizer="paged_adamw_8bit")
    assert eight_bit == pytest.approx(14.633, abs=0.001)


def _kernel(name, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur}


def test_trace_reader_counts_collectives_once_and_finds_what_compute_hides():
    trace = {
        "traceEvents": [
            _kernel("ampere_bf16_gemm", 0, 100),
            _kernel("ncclDevKernel_AllReduce_Sum_bf16", 50, 100),  # 50 us hidden by the gemm
            _kernel("ncclDevKernel_AllGather", 120, 10),  # overlaps the all-reduce: counted once
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy HtoD (Pinned -> Device)",
                "ts": 0,
                "dur": 5,
                "args": {"bytes": 4000},
            },
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy DtoH (Device -> Pageable)",
                "ts": 200,
                "dur": 1,
                "args": {"bytes": 8},
            },
        ]
    }
    s = summarize(trace, steps=2, device="cuda")
    assert s.comm_sec_per_step == pytest.approx(100e-6 / 2)
    assert s.comm_exposed_sec_per_step == pytest.approx(50e-6 / 2)
    assert s.h2d_bytes_per_step == 2000 and s.d2h_bytes_per_step == 4
    assert s.collectives_per_step == 1.0


def test_trace_reader_on_cpu_uses_gloo_annotations():
    trace = {
        "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 0, "dur": 300}]
    }
    s = summarize(trace, steps=3, device="cpu")
    assert s.comm_sec_per_step == pytest.approx(100e-6)
    assert s.comm_exposed_sec_per_step is None and s.h2d_bytes_per_step is None


def test_timing_agreement_check():
    gpu = {
        "device": "cuda",
        "strategy": "ddp",
        "timing": {"events_vs_clock": 0.001, "sum_of_steps_sec": 10.01, "window_sec": 10.0},
    }
    assert check_timing(gpu).passed is True
    gpu["timing"] = {"events_vs_clock": -0.05, "sum_of_steps_sec": 9.5, "window_sec": 10.0}
    out = check_timing(gpu)
    assert out.passed is False and "-5.00%" in out.message and "beyond 2%" in out.message
    assert check_timing({"device": "cpu", "timing": {}}).passed is None


def test_timing_agreement_allows_the_loops_own_time_between_short_steps():
    # 1x H100, llama-tiny, 3 steps: the events sum 2.7 ms short of a 70 ms window (-3.85%)
    short = {
        "device": "cuda",
        "strategy": "ddp",
        "step_times_sec": [0.0224, 0.0224, 0.0225],
        "timing": {"events_vs_clock": -0.0385, "sum_of_steps_sec": 0.0673, "window_sec": 0.0700},
    }
    out = check_timing(short)
    assert out.passed is True and "2.70 ms over 4 step boundaries" in out.message
    # 10 ms lost in the same short window is more than the loop's own time: a stall
    short["timing"] |= {"sum_of_steps_sec": 0.060, "events_vs_clock": 0.060 / 0.070 - 1}
    assert check_timing(short).passed is False
