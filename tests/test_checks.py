"""The validation checks pass and fail on the numbers, and their messages show them."""

from llmbench_pytest.checks import check_loss_falls, check_memory, check_sharding, check_step_time_cv


def result(**kw):
    base = {
        "strategy": "zero2",
        "world_size": 2,
        "offload": "none",
        "device": "cuda",
        "steps": 4,
        "mean_step_time_sec": 1.0,
        "step_time_std_sec": 0.05,
        "step_time_min_sec": 0.95,
        "step_time_max_sec": 1.1,
        "step_time_cv": 0.05,
        "losses": [8.0, 7.0, 6.0],
        "peak_reserved_gb": 20.0,
        "model_state_gb": 10.0,
        "per_rank": [{"device_total_gb": 80.0}],
    }
    base.update(kw)
    return base


def test_memory_against_the_device_and_a_set_limit():
    assert check_memory(result(), None).passed is True  # 20 GB on an 80 GB device
    out = check_memory(result(peak_reserved_gb=30.0), 24.0)
    assert out.passed is False
    assert "30.000 GB exceeds the limit of 24.000 GB" in out.message and "--llmbench-batch" in out.message


def test_memory_on_cpu_without_limit_does_not_apply():
    out = check_memory(result(device="cpu", peak_host_rss_gb=1.2, per_rank=[{}]), None)
    assert out.passed is None


def test_step_time_cv():
    assert check_step_time_cv(result(), 0.10).passed is True
    out = check_step_time_cv(result(step_time_cv=0.142), 0.10)
    assert out.passed is False
    assert "CV 14.2%" in out.message and "> 10.0%" in out.message and "--llmbench-max-cv" in out.message


def test_runs_in_epochs_are_held_to_their_epoch_times():
    # a GPU outrunning a small model: the steps jitter with the host, the epochs agree
    steady = [{"wall_sec": 16.1}, {"wall_sec": 16.9}]
    out = check_step_time_cv(result(step_time_cv=0.17, epochs=steady), 0.10)
    assert (
        out.passed is True
        and "epoch wall time CV 3.4%" in out.message
        and "step time CV 17.0%" in out.message
    )
    out = check_step_time_cv(result(epochs=[{"wall_sec": 10.0}, {"wall_sec": 14.0}]), 0.10)
    assert out.passed is False and "CV 23.6%" in out.message and "--llmbench-warmup-epochs" in out.message
    assert check_step_time_cv(result(epochs=[{"wall_sec": 10.0}]), 0.10).passed is None


def test_loss_must_fall():
    assert check_loss_falls(result()).passed is True
    out = check_loss_falls(result(losses=[6.0, 6.5, 7.0]))
    assert out.passed is False and "first third 6.0000, of the last third 7.0000" in out.message
    assert check_loss_falls(result(losses=[5.0])).passed is None


def test_sharding_order_holds_and_breaks():
    peers = {
        "zero1": result(strategy="zero1", model_state_gb=12.0),
        "zero3": result(strategy="zero3", model_state_gb=8.0),
    }
    ok = check_sharding(result(model_state_gb=10.0), peers)
    assert ok.passed is True
    assert (
        "zero3 8.0000 GB < zero2 10.0000 GB" in ok.message
        and "zero2 10.0000 GB <= zero1 12.0000 GB" in ok.message
    )
    bad = check_sharding(result(model_state_gb=13.0), peers)
    assert bad.passed is False and "zero2 13.0000 GB <= zero1 12.0000 GB" in bad.message


def test_sharding_not_applicable_alone_or_at_world_size_one():
    assert check_sharding(result(), {}).passed is None
    assert check_sharding(result(world_size=1), {"zero1": result(strategy="zero1")}).passed is None
