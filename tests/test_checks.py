"""The validation checks pass and fail on the numbers, and their messages show them."""

import random

import pytest

from llmbench_pytest.analysis.memory_model import InFlight, predicted_gb, predicted_host_gb
from llmbench_pytest.analysis.stats import cv_lower_limit
from llmbench_pytest.checks import (
    CPU_SMOKE,
    check_loss_falls,
    check_mean_interval,
    check_memory,
    check_model_states,
    check_repeat_spread,
    check_scaling,
    check_sharding,
    check_step_time_cv,
)
from llmbench_pytest.checks.memory import DEVICE_LIMIT, memory_limit


def result(**kw):
    base = {
        "strategy": "zero2",
        "world_size": 2,
        "offload": "none",
        "device": "cuda",
        "dtype": "bf16",
        "steps": 4,
        "per_device_batch": 8,
        "grad_accum": 1,
        "mean_step_time_sec": 1.0,
        "step_time_std_sec": 0.05,
        "step_time_min_sec": 0.95,
        "step_time_max_sec": 1.1,
        "step_cv_in_run": 0.05,
        "step_times_sec": [1.0, 0.98, 1.02, 1.01, 0.99, 1.0],
        "losses": [8.0, 7.0, 6.0],
        "peak_reserved_gb": 20.0,
        "peak_vram_gb": 18.0,
        "model_state_gb": 10.0,
        "per_rank": [{"device_total_gb": 80.0}],
        "tokens_per_sec": 1000.0,
    }
    base.update(kw)
    return base


def test_memory_against_the_tier_and_a_set_limit():
    out = check_memory(result(), 80.0, "tier B's limit")
    assert out.passed is True and "(tier B's limit)" in out.message
    out = check_memory(result(peak_reserved_gb=30.0), 24.0, "tier A's limit")
    assert out.passed is False and (out.measured, out.limit) == (30.0, 24.0)
    assert "30.000 GB exceeds the limit of 24.000 GB (tier A's limit)" in out.message
    assert "--llmbench-batch" in out.message


def test_with_auto_a_gpu_run_is_held_to_its_own_memory_and_a_named_tier_to_the_tiers():
    # llama-7b's ddp on 4x H200 (2026-11-28): 137.0 GB allocated, fits the 150.11 GB CUDA reports
    h200 = result(strategy="ddp", gpu_name="NVIDIA H200", peak_vram_gb=137.0, peak_reserved_gb=145.2,
                  per_rank=[{"device_total_gb": 150.11}, {"device_total_gb": 150.11}])  # fmt: skip
    limit, source = memory_limit(None, "auto", "B", 80.0, "cuda")
    assert (limit, source) == (None, DEVICE_LIMIT)
    out = check_memory(h200, limit, source)
    assert out.passed is True and out.limit == 150.11, out.message
    assert "145.200 GB <= limit 150.110 GB (NVIDIA H200's own memory)" in out.message
    # the same run where the user names tier B: its 80 GB, and the message says who chose it
    out = check_memory(h200, *memory_limit(None, "B", "B", 80.0, "cuda"))
    assert out.passed is False and out.limit == 80.0
    assert "exceeds the limit of 80.000 GB (tier B's limit, --llmbench-tier B)" in out.message
    # the option wins over both; on a CPU auto keeps the tier's limit (the RSS counts libraries)
    assert memory_limit(100.0, "B", "B", 80.0, "cuda") == (100.0, "--llmbench-vram-limit-gb")
    assert memory_limit(None, "auto", "A", 24.0, "cpu") == (24.0, "tier A's limit, picked for a CPU run")


def test_a_run_out_of_memory_fails_the_memory_check_whatever_its_limit():
    oom = result(status="oom", error="torch.OutOfMemoryError: CUDA out of memory", peak_reserved_gb=None)
    out = check_memory(oom, None, DEVICE_LIMIT)
    assert out.passed is False and "zero2 ran out of memory: torch.OutOfMemoryError" in out.message
    # a run the allocator fitted only by emptying its cache says it is at its GPU's limit
    tight = result(per_rank=[{"device_total_gb": 150.11, "alloc_retries": 3}])
    out = check_memory(tight, None, DEVICE_LIMIT)
    assert out.passed is True and "emptied its cache 3 time(s)" in out.message


def test_memory_on_cpu_is_the_peak_rss():
    out = check_memory(result(device="cpu", peak_host_rss_gb=1.2, per_rank=[{}]), 24.0)
    assert out.passed is True and "peak host memory (RSS) 1.200 GB" in out.message
    assert check_memory(result(device="cpu", peak_host_rss_gb=1.2), 0.5).passed is False


# ---- variance: between runs, and how well one run's mean is known


def repeats(*rates):
    mean = sum(rates) / len(rates)
    return {
        "count": len(rates),
        "tokens_per_sec": list(rates),
        "tokens_per_sec_mean": mean,
        "tokens_per_sec_std": 0.0,
        "max_deviation": max(abs(r - mean) for r in rates) / mean,
    }


def test_step_time_cv_is_about_runs_not_steps():
    # one run, however jittery: seed 000's rule compares runs, so no verdict
    out = check_step_time_cv(result(step_cv_in_run=0.40), 0.10)
    assert out.passed is None and "--llmbench-repeat=2" in out.message
    # repeats: their tokens/s
    assert check_step_time_cv(result(repeats=repeats(1000, 1020, 990)), 0.10).passed is True
    out = check_step_time_cv(result(repeats=repeats(1000, 1300, 800)), 0.10)
    assert out.passed is False and out.measured == pytest.approx(0.2435, abs=1e-3)
    assert "tokens/s between repeats varies too much: tokens/s CV 24.4% over 3 repeats" in out.message
    assert "--llmbench-max-cv" in out.message


def test_epochs_are_judged_from_five_on():
    # 2 epochs 13% apart (the encoder-decoder): too few to estimate a spread
    two = [{"wall_sec": 7.2}, {"wall_sec": 8.6}]
    out = check_step_time_cv(result(epochs=two), 0.10)
    assert out.passed is None and "--llmbench-epochs=5" in out.message and "2 epochs" in out.message
    steady = [{"wall_sec": w} for w in (16.1, 16.9, 16.4, 16.6, 16.2)]
    out = check_step_time_cv(result(epochs=steady, step_cv_in_run=0.17), 0.10)
    assert out.passed is True and "epoch wall time: CV 2.0% (mean 16.44 s over 5 epochs)" in out.message
    erratic = [{"wall_sec": w} for w in (10.0, 14.0, 10.5, 13.5, 10.0)]
    out = check_step_time_cv(result(epochs=erratic), 0.10)
    assert out.passed is False and "--llmbench-warmup-epochs" in out.message
    # a healthy run whose epochs are 10% apart but not beyond what 5 values of a spread within the
    # bound show: no verdict, and what would decide
    unsure = [{"wall_sec": 5 * w} for w in (2.527, 2.054, 2.045, 2.386, 2.062)]
    out = check_step_time_cv(result(epochs=unsure), 0.10)
    assert out.passed is None and out.measured == pytest.approx(0.102, abs=1e-3)
    assert "5 values cannot tell it from a spread within the bound" in out.message
    assert "--llmbench-epochs" in out.message


def test_epochs_of_seconds_are_parts_of_one_run():
    # the healthy encoder-decoder DDP from disk on 4x H200 (docs/results/2026-11-27-h200x4-four-gpus):
    # eleven 20-step epochs of about a second, 15.5% apart (15.7% from the rounded walls) in slow and
    # fast stretches of the host
    walls = (0.99, 0.93, 1.24, 1.22, 1.1, 0.97, 0.95, 0.87, 0.9, 1.28, 1.33)
    short = [{"wall_sec": w, "samples": 1280} for w in walls]
    out = check_step_time_cv(result(epochs=short), 0.10)
    assert out.passed is None and out.measured == pytest.approx(0.157, abs=1e-3)
    assert "reported, not judged: epochs shorter than 10 s are parts of one run" in out.message
    assert "--llmbench-repeat=2" in out.message and "--llmbench-dataset-samples=11953" in out.message
    # the same stretches in epochs long enough to stand for runs (a host or GPU slowing for whole
    # epochs at a time) fail as before
    out = check_step_time_cv(result(epochs=[{"wall_sec": 10 * w} for w in walls]), 0.10)
    assert out.passed is False and "beyond doubt" in out.message


def test_the_cv_lower_limit_agrees_with_the_chi_square_reference():
    # sigma >= s * sqrt((n-1) / chi2_0.95(n-1)), with scipy.stats' chi-square as the reference
    from scipy.stats import chi2

    for n in (2, 3, 5, 12):
        expected = 0.1 * ((n - 1) / chi2.ppf(0.95, n - 1)) ** 0.5
        assert cv_lower_limit(0.1, n) == pytest.approx(expected, rel=1e-9)
    with pytest.raises(ValueError):
        cv_lower_limit(0.1, 1)


def ar1_steps(n, mean, cv, rho=0.0, seed=1):
    """Correlated step times: an AR(1) around `mean` with relative spread `cv`."""
    rng = random.Random(seed)
    x, out = 0.0, []
    for _ in range(n):
        x = rho * x + (1 - rho**2) ** 0.5 * rng.gauss(0, cv * mean)
        out.append(mean + x)
    return out


def test_a_jittery_strategy_with_a_well_known_mean_passes():
    # the ZeRO-3 on an H100: CV 11.5% over 30 steps, mean known to about +-4%
    times = ar1_steps(30, 0.4069, 0.115)
    out = check_mean_interval(result(step_times_sec=times), 0.10)
    assert out.passed is True and 0.02 < out.measured < 0.07
    assert "effective of 30 steps" in out.message and "p95/p50" in out.message and "MAD" in out.message


def test_a_mean_not_known_to_ten_percent_fails_and_says_how_many_steps_would_do():
    times = ar1_steps(10, 0.5, 0.30, rho=0.5, seed=3)
    out = check_mean_interval(result(step_times_sec=times), 0.10)
    assert out.passed is False and out.measured > 0.10 and out.limit == 0.10
    assert "not known well enough" in out.message and "steps would do (--llmbench-steps)" in out.message


def test_outliers_are_reported_with_their_positions_and_do_not_fail_the_run():
    times = [0.400 + 0.002 * (i % 3) for i in range(30)]
    times[6] = times[19] = 1.5  # two stalls
    out = check_mean_interval(result(step_times_sec=times), 0.10)
    assert out.passed is True and "2 outliers (steps 7, 20)" in out.message


def test_timing_verdicts_are_withheld_on_cpu_with_the_numbers():
    times = ar1_steps(10, 0.5, 0.30, rho=0.5, seed=3)
    out = check_mean_interval(result(step_times_sec=times, device="cpu"), 0.10)
    assert out.passed is None and out.measured > 0.10 and CPU_SMOKE in out.message


def test_repeats_must_agree():
    assert check_repeat_spread(result(repeats=repeats(1000, 1010)), 0.05).passed is True
    out = check_repeat_spread(result(repeats=repeats(1000, 1300)), 0.05)
    assert out.passed is False and "repeats disagree" in out.message
    assert check_repeat_spread(result(), 0.05).passed is None


# ---- model states per run, against the prediction


def states(strategy, ws, measured_bytes_per_param, dtype="fp32", **kw):
    params = 5_261_568
    info = {"vocab_size": 4096, "hidden_size": 256}
    config = {"deepspeed_config": {"zero_optimization": {"reduce_bucket_size": 65536, "overlap_comm": False}}}
    flight = InFlight.of(info, config)
    fields = {
        "strategy": strategy,
        "world_size": ws,
        "dtype": dtype,
        "device": "cpu",
        "params": params,
        "model_info": info,
        "strategy_config": config,
        "model_state_gb": measured_bytes_per_param * params / 1e9,
        "model_state_predicted_gb": predicted_gb(
            strategy, "none", ws, dtype, params, inflight=flight, device="cpu"
        ),
    }
    return result(**{**fields, **kw})


def test_model_states_tell_zero1_from_zero2_at_two_ranks():
    # measured on CPU, llama-tiny fp32, census at the end of backward (bytes per parameter)
    assert check_model_states(states("zero1", 2, 14.053)).passed is True
    assert check_model_states(states("zero2", 2, 12.90)).passed is True
    assert check_model_states(states("zero3", 2, 11.649)).passed is True
    assert check_model_states(states("ddp", 2, 16.003)).passed is True
    # a zero2 that keeps full gradients holds what zero1 holds
    out = check_model_states(states("zero2", 2, 14.053))
    assert out.passed is False and out.measured == pytest.approx(0.093, abs=0.005)
    assert "that is what zero1 holds" in out.message and "not partitioning what its name says" in out.message
    # and a ddp that held only half its states would not pass either
    out = check_model_states(states("ddp", 2, 8.0))
    assert out.passed is False and "holds less than predicted" in out.message


def gpu_states(strategy, ws, measured_gb):
    """A llama-1b bf16 run on GPUs, its config as deepspeed_zero.build_config writes it there."""
    params = 953_223_168
    info = {
        "params": params,
        "layers": 16,
        "hidden_size": 2048,
        "heads": 32,
        "head_dim": 64,
        "vocab_size": 32000,
    }
    zero = {"stage": int(strategy[-1]), "reduce_bucket_size": 2048**2, "overlap_comm": True}
    config = {"deepspeed_config": {"zero_optimization": zero}}
    predicted = predicted_gb(strategy, "none", ws, "bf16", params, inflight=InFlight.of(info, config))
    return result(
        strategy=strategy, world_size=ws, params=params, model_info=info, strategy_config=config,
        model_state_gb=measured_gb, model_state_predicted_gb=predicted,
    )  # fmt: skip


@pytest.mark.parametrize(("ws", "zero1_gb"), [(2, 9.42), (4, 6.42)])
def test_zero1_on_gpus_passes_and_a_zero2_holding_as_much_fails(ws, zero1_gb):
    # 4x H200 host (2026-11-27, issue 41), llama-1b bf16: zero1's census at 2 and 4 GPUs, which the
    # prediction without its held gradients failed (+7.9% and +19.1%)
    ok = check_model_states(gpu_states("zero1", ws, zero1_gb))
    assert ok.passed is True and abs(ok.measured) < 0.001, ok.message
    # LLMBENCH_INJECT_FAULT=zero2:stage=1: a "zero2" that DeepSpeed runs at stage 1 holds zero1's
    bad = check_model_states(gpu_states("zero2", ws, zero1_gb))
    assert bad.passed is False and bad.measured > 0.05, bad.message
    assert "that is what zero1 holds" in bad.message and "not partitioning what its name says" in bad.message


def test_model_states_without_a_prediction_say_why():
    out = check_model_states(states("zero2", 2, 25.6, offload="cpu", model_state_predicted_gb=None))
    assert out.passed is None and "on a CPU the device is the host" in out.message
    out = check_model_states(states("zero2", 2, 10.0, optimizer="lion", model_state_predicted_gb=None))
    assert out.passed is None and "no prediction for zero2 around lion" in out.message
    assert check_model_states(result(model_state_gb=None)).passed is None


# ---- seed 000's order of peak memory


# 2x H200, llama-1b (docs/results/2026-11-22-h200x2-llama-1b): measured peak allocated, and the peak
# analysis/peak_model.py predicts for each run (plan/validate.rows at this commit, 2026-11-27)
H200X2 = {
    "ddp": (53.823, 54.896),
    "fsdp": (37.452, 38.415),
    "fsdp_grad_op": (38.994, 40.059),
    "zero2": (38.985, 40.076),
    "zero3": (40.903, 39.244),
}


def peaks(strategy, measured, predicted=None, **kw):
    return result(strategy=strategy, peak_vram_gb=measured, peak_predicted_gb=predicted, **kw)


def test_peak_memory_order_follows_the_predictions():
    peers = {name: peaks(name, *H200X2[name]) for name in ("ddp", "fsdp", "fsdp_grad_op")}
    ok = check_sharding(peaks("zero3", *H200X2["zero3"]), peers)
    assert ok.passed is True, ok.message
    assert (
        "zero3 40.903 GB vs fsdp 37.452 GB (+9.2%), predicted 39.244 vs 38.415 GB (+2.2%): zero3 +4.2% "
        "against its prediction, fsdp -2.5%"
    ) in ok.message


@pytest.mark.parametrize(
    ("zero3", "fsdp"),
    # LoRA on mistral-7b, issue 41 (4x H200 host, 2026-11-27): zero3 20.4% above fsdp at 2 GPUs and
    # 23.2% at 4, each peak within 0.4% and 5% of its own prediction (predictions here at those gaps)
    [((35.3, 35.2), (29.3, 28.0)), ((31.6, 31.5), (25.7, 24.5))],
)
def test_a_peak_predicted_above_its_peer_passes_where_the_fixed_rule_failed(zero3, fsdp):
    lora = {"workload": "lora", "lora_rank": 16}
    out = check_sharding(peaks("zero3", *zero3, **lora), {"fsdp": peaks("fsdp", *fsdp, **lora)})
    assert out.passed is True, out.message
    # the card's fixed rule, where there is no prediction, fails the same two peaks
    bare = check_sharding(peaks("zero3", zero3[0], **lora), {"fsdp": peaks("fsdp", fsdp[0], **lora)})
    assert bare.passed is False and "no peak prediction for zero3 and fsdp" in bare.message


def test_a_strategy_that_does_not_shard_breaks_the_order():
    # LLMBENCH_INJECT_FAULT=zero3:stage=0 runs "zero3" as ZeRO-0: its peak is zero0's, measured
    # 44.706 GB in the same 2x H200 session, 13.9% above what zero3 is predicted to hold
    peers = {name: peaks(name, *H200X2[name]) for name in ("ddp", "fsdp", "fsdp_grad_op")}
    bad = check_sharding(peaks("zero3", 44.706, H200X2["zero3"][1]), peers)
    assert bad.passed is False, bad.message
    assert (
        "zero3 44.706 GB vs fsdp 37.452 GB (+19.4%), predicted 39.244 vs 38.415 GB (+2.2%): zero3 +13.9% "
        "against its prediction, fsdp -2.5%; zero3 sits above fsdp and more than 10% above its prediction"
    ) in bad.message
    assert "zero3 44.706 GB vs ddp" not in bad.message.split("breaks the expected order")[1]  # below ddp
    assert "not shard what its name says" in bad.message and "strategy_config" in bad.message
    # the same pair seen from fsdp's run, when zero3 ran first
    zero3 = peaks("zero3", 44.706, H200X2["zero3"][1])
    assert check_sharding(peaks("fsdp", *H200X2["fsdp"]), {"zero3": zero3}).passed is False
    # above its prediction but still below its peer: the order holds (peak_prediction judges the gap)
    assert check_sharding(peaks("zero3", 41.2, 36.0), {"fsdp": peaks("fsdp", 42.0, 42.0)}).passed is True


def test_without_predictions_the_cards_fixed_rule_applies_and_says_so():
    # measured at 2x H200 (llama-1b): ddp 53.82, fsdp 37.45, fsdp_grad_op 38.99, zero3 40.90 GB
    peers = {
        "ddp": result(strategy="ddp", peak_vram_gb=53.82),
        "fsdp": result(strategy="fsdp", peak_vram_gb=37.45),
        "fsdp_grad_op": result(strategy="fsdp_grad_op", peak_vram_gb=38.99),
    }
    ok = check_sharding(result(strategy="zero3", peak_vram_gb=40.90), peers)
    assert ok.passed is True, ok.message
    assert (
        "zero3 40.900 GB vs ddp 53.820 GB (-24.0%), no peak prediction for zero3 and ddp: the card's "
        "rule, zero3 at least 1% below ddp"
    ) in ok.message
    assert (
        "zero3 40.900 GB vs fsdp 37.450 GB (+9.2%)" in ok.message
        and "zero3 at most 10% above fsdp" in ok.message
    )
    bad = check_sharding(result(strategy="zero2", peak_vram_gb=54.0), peers)
    assert bad.passed is False and "zero2 54.000 GB vs ddp 53.820 GB" in bad.message
    assert check_sharding(result(strategy="zero3", peak_vram_gb=45.0), peers).passed is False
    # one run of the pair without a prediction is enough to fall back, and the message names it
    one = check_sharding(peaks("zero2", *H200X2["zero2"]), {"ddp": peaks("ddp", 53.823)})
    assert one.passed is True and "no peak prediction for ddp: the card's rule" in one.message


def test_peak_memory_order_not_applicable_alone_at_world_size_one_or_on_cpu():
    peers = {"ddp": result(strategy="ddp", peak_vram_gb=53.82)}
    assert check_sharding(result(), {}).passed is None
    assert check_sharding(result(world_size=1), peers).passed is None
    assert check_sharding(result(device="cpu"), peers).passed is None


# ---- scaling


def test_scaling_against_the_smallest_world_size():
    # 2x H200, fsdp_grad_op: 62,796 tokens/s on one GPU, 123,430 on two
    one = result(strategy="fsdp_grad_op", world_size=1, tokens_per_sec=62796.0)
    two = result(strategy="fsdp_grad_op", world_size=2, tokens_per_sec=123430.0)
    out = check_scaling(two, one, 0.60)
    assert out.passed is True and out.measured == pytest.approx(0.983, abs=1e-3)
    assert "weak scaling: 2 GPUs 123,430 tokens/s against 1 GPU 62,796: efficiency 98%" in out.message
    assert check_scaling(one, None, 0.60).passed is None


def test_scaling_fails_below_the_threshold_and_names_the_threads():
    # 2x H200, zero2_offload: two GPUs slower than one, each rank's CPU Adam on one thread
    one = result(
        strategy="zero2_offload", world_size=1, tokens_per_sec=28489.8, metadata={"cpu_threads_per_rank": 32}
    )
    two = result(
        strategy="zero2_offload", world_size=2, tokens_per_sec=23059.4, metadata={"cpu_threads_per_rank": 1}
    )
    out = check_scaling(two, one, 0.60)
    assert out.passed is False and out.measured == pytest.approx(0.405, abs=1e-3)
    assert "efficiency 40% of linear" in out.message and "< 60%" in out.message
    assert "Host threads per rank: 32 at world size 1, 1 at 2" in out.message


def test_strong_scaling_when_the_global_batch_is_kept():
    one = result(world_size=1, per_device_batch=8, tokens_per_sec=1000.0)
    two = result(world_size=2, per_device_batch=4, tokens_per_sec=1900.0)
    out = check_scaling(two, one, 0.60)
    assert out.passed is True and "strong scaling" in out.message


def test_scaling_is_recorded_but_not_judged_on_cpu():
    one = result(device="cpu", world_size=1, tokens_per_sec=743.0)
    two = result(device="cpu", world_size=2, tokens_per_sec=776.0)
    out = check_scaling(two, one, 0.60)
    assert out.passed is None and out.measured == pytest.approx(0.522, abs=1e-3) and CPU_SMOKE in out.message


def test_loss_must_fall():
    assert check_loss_falls(result()).passed is True
    out = check_loss_falls(result(losses=[6.0, 6.2, 6.4, 6.6, 6.8, 7.0]))
    assert out.passed is False and "first third 6.1000, of the last third 6.9000" in out.message
    assert check_loss_falls(result(losses=[5.0])).passed is None


def test_a_rise_over_a_few_steps_is_no_verdict_a_fall_still_passes():
    # the 2x H200 zero3_nvme window of 3 steps after one warm-up step: llama-1b's early rise
    out = check_loss_falls(result(losses=[10.28, 13.29, 19.76]))
    assert out.passed is None and "fewer than 6 steps" in out.message and "--llmbench-steps=6" in out.message
    assert check_loss_falls(result(losses=[10.28, 9.0, 8.1])).passed is True


def test_scaling_of_repeated_runs_uses_their_mean():
    one = result(world_size=1, tokens_per_sec=900.0, repeats={"count": 3, "tokens_per_sec_mean": 1000.0})
    two = result(world_size=2, tokens_per_sec=2100.0, repeats={"count": 3, "tokens_per_sec_mean": 1900.0})
    assert check_scaling(two, one, 0.60).measured == pytest.approx(0.95)


# ---- offload on a GPU: device and host shares, measured on 1x H100 (llama-1b, bf16, 2026-11-24;
# docs/results/2026-11-24-h100-verdicts)

H100_OFFLOAD = {  # strategy: (device GB, host GB) from the census at the end of backward
    "zero1_offload": (2.185500468, 17.303244804),
    "zero2_offload": (2.185500468, 17.303244804),
    "zero3_offload": (0.270800332, 19.066822661),
}


def offloaded(strategy, device_gb, host_gb):
    params = 953_223_168
    info = {"vocab_size": 32000, "hidden_size": 2048}
    config = {
        "deepspeed_config": {"zero_optimization": {"reduce_bucket_size": 2048 * 2048, "overlap_comm": True}}
    }
    flight = InFlight.of(info, config)
    stage = strategy.removesuffix("_offload")
    return result(
        strategy=strategy, offload="cpu", world_size=1, dtype="bf16", device="cuda", params=params,
        model_info=info, strategy_config=config, model_state_gb=device_gb, model_state_host_gb=host_gb,
        model_state_predicted_gb=predicted_gb(stage, "cpu", 1, "bf16", params, inflight=flight),
        model_state_host_predicted_gb=predicted_host_gb(stage, "cpu", 1, "bf16", params, inflight=flight),
    )  # fmt: skip


@pytest.mark.parametrize("strategy", sorted(H100_OFFLOAD))
def test_offload_is_predicted_on_the_device_and_the_host(strategy):
    device_gb, host_gb = H100_OFFLOAD[strategy]
    out = check_model_states(offloaded(strategy, device_gb, host_gb))
    assert out.passed is True and abs(out.measured) < 0.005, out.message
    assert "in host memory" in out.message


def test_an_offload_gap_names_the_part_it_amounts_to():
    # the device share without the embedding-sized transfer buffer: one part the prediction counts
    device_gb, host_gb = H100_OFFLOAD["zero2_offload"]
    out = check_model_states(offloaded("zero2_offload", device_gb - 0.131072, host_gb))
    assert out.passed is False
    assert "holds less than predicted on the device, by 0.13" in out.message
    assert "that is 1 x the input embedding" in out.message
    # optimizer state missing from the host: no part of that size, so no cause is named
    out = check_model_states(offloaded("zero2_offload", device_gb, host_gb - 2.0))
    assert out.passed is False and "on the host" in out.message and "matches no part" in out.message


# ---- a data-bound spread is reported as such, never failed (the encoder-decoder from disk)


def _steps_with_a_spike(n=40, spike=3.0):
    rng = random.Random(3)
    times = [0.1 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(n)]
    times[n // 2] *= spike  # one step after a long wait for its batches
    return times


def test_a_data_bound_spread_is_reported_not_failed():
    times = _steps_with_a_spike()
    waited = result(
        step_times_sec=times, device="cuda", data="disk", data_wait_fraction=0.08, idle_fraction=0.05
    )
    out = check_mean_interval(waited, 0.02)
    assert out.passed is None and "a data-bound spread" in out.message
    assert "waited for data (disk) 8.0% of the wall time" in out.message
    # the same steps with no wait for data: the bound is applied, and they fail it
    fed = result(
        step_times_sec=times, device="cuda", data="memory", data_wait_fraction=0.0, idle_fraction=0.0
    )
    assert check_mean_interval(fed, 0.02).passed is False
    # a data-bound run whose mean is known well enough passes as any other
    assert check_mean_interval(waited, 0.5).passed is True
