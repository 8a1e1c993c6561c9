"""The default learning rate follows the model's size for pre-training (GPT-3's table) and rises to it
over a linear warm-up (Ma & Yarats' 2 / (1 - beta2) updates), so that a 3-7B model's loss falls as it
would in a real run; LoRA and the encoder-decoder keep 1e-3 from the first update, and --llmbench-lr
and --llmbench-lr-warmup set any."""

from __future__ import annotations

import math

import pytest
import torch

from llmbench_pytest.config.hardware import Hardware
from llmbench_pytest.config.learning_rate import (
    ADAM_BETAS,
    GPT3_PEAK_LR,
    SMALL_MODEL_LR,
    default_lr,
    default_lr_warmup,
    lr_at,
    pretraining_lr,
    untuned_warmup,
)
from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.config.presets import estimated_params, model_names, resolve_model
from llmbench_pytest.config.spec import SpecError
from llmbench_pytest.launch.matrix import build_matrix
from llmbench_pytest.worker.strategies.lr_schedule import LrSchedule

H200 = Hardware(device="cuda", gpu_name="NVIDIA H200", gpu_count=1, device_gib=139.8, bf16=True, cpu_cores=16)


@pytest.mark.parametrize(("params", "lr"), GPT3_PEAK_LR[1:])
def test_the_table_s_own_sizes_get_its_rates(params, lr):
    assert pretraining_lr(int(params)) == pytest.approx(lr, rel=1e-6)


def test_between_sizes_the_rate_is_interpolated_on_log_log_axes():
    # halfway between 1.3B and 2.7B on a log axis: the geometric mean of 2.0e-4 and 1.6e-4
    middle = math.sqrt(1.3e9 * 2.7e9)
    assert pretraining_lr(int(middle)) == pytest.approx(math.sqrt(2.0e-4 * 1.6e-4), rel=1e-6)
    assert 1.2e-4 < pretraining_lr(6_000_000_000) < 1.6e-4
    # small models: the trend passes 1e-3 below about 55M parameters, the cap
    assert pretraining_lr(125_000_000) == pytest.approx(6e-4)
    assert pretraining_lr(1_328_256) == SMALL_MODEL_LR
    # beyond the table: the last segment's trend, falling
    assert pretraining_lr(400_000_000_000) < 0.6e-4
    with pytest.raises(ValueError, match="has parameters"):
        pretraining_lr(0)


def test_only_pretraining_follows_the_size():
    assert default_lr("causal_lm", 6_738_415_616) == pytest.approx(1.2e-4, rel=0.01)
    assert default_lr("lora", 7_248_023_552) == SMALL_MODEL_LR
    assert default_lr("seq2seq", 53_053_440) == SMALL_MODEL_LR
    assert default_lr("causal_lm", None) == SMALL_MODEL_LR


@pytest.mark.parametrize("name", model_names())
def test_the_estimate_is_close_to_what_transformers_builds(name):
    """The recorded counts (models.toml, checked against transformers by test_presets) against the
    estimate used where none is recorded."""
    preset = resolve_model(name)
    estimate = estimated_params(preset.config)
    assert estimate is not None and preset.params
    assert estimate == pytest.approx(preset.params, rel=0.07), (estimate, preset.params)
    assert default_lr("causal_lm", estimate) == pytest.approx(
        default_lr("causal_lm", preset.params), rel=0.05
    )


def _lr(values: dict[str, str]) -> float:
    opts = SessionOptions().with_values({"strategies": "ddp", **values}, "command line")
    (entry,) = [e for e in build_matrix(opts, H200, [1]) if e.spec is not None]
    return entry.spec.lr


def test_the_matrix_gives_each_model_its_rate_and_the_option_wins():
    assert _lr({"model": "llama-7b"}) == pytest.approx(1.2e-4, rel=0.01)
    assert _lr({"model": "llama-1b"}) == pytest.approx(2.28e-4, rel=0.01)
    assert _lr({"model": "llama-7b", "lr": "1e-3"}) == 1e-3
    # a preset with its config changed has no recorded count: the estimate serves
    assert _lr({"model": "llama-7b", "model_config": "num_hidden_layers=16"}) > 1.2e-4
    assert _lr({"model": "llama-7b", "workload": "lora"}) == SMALL_MODEL_LR


def test_the_warm_up_is_ma_and_yarats_rule_for_pretraining_only():
    assert untuned_warmup(0.95) == 40 and untuned_warmup(0.999) == 2000
    assert default_lr_warmup("causal_lm") == 40
    assert default_lr_warmup("lora") == 0 and default_lr_warmup("seq2seq") == 0
    assert [lr_at(1e-3, 4, n) for n in (1, 2, 4, 5, 100)] == pytest.approx([2.5e-4, 5e-4, 1e-3, 1e-3, 1e-3])
    assert lr_at(1e-3, 0, 1) == 1e-3  # no warm-up: the peak from the first update
    with pytest.raises(ValueError, match="count from 1"):
        lr_at(1e-3, 4, 0)


def _spec_of(values: dict[str, str]):
    opts = SessionOptions().with_values({"strategies": "ddp", **values}, "command line")
    (entry,) = [e for e in build_matrix(opts, H200, [1]) if e.spec is not None]
    return entry.spec


def test_the_matrix_gives_pretraining_its_warm_up_and_the_option_wins():
    assert _spec_of({"model": "llama-7b"}).lr_warmup == 40
    assert _spec_of({"model": "llama-7b", "lr_warmup": "0"}).lr_warmup == 0
    assert _spec_of({"model": "llama-7b", "workload": "lora"}).lr_warmup == 0
    with pytest.raises(SpecError, match="--llmbench-lr-warmup"):
        SessionOptions().with_values({"lr_warmup": "-1"}, "command line")


def test_every_update_moves_the_weights_by_its_scheduled_rate():
    """A constant gradient makes each AdamW update move a weight by its rate (m / sqrt(v) = 1): the
    weight's path is the schedule's, update by update, so the rate reaches the stepping optimizer."""
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([weight], lr=1e-3, betas=ADAM_BETAS, eps=1e-12, weight_decay=0.0)
    schedule = LrSchedule(optimizer, peak=1e-3, warmup=4)
    moved = []
    for _ in range(6):
        weight.grad = torch.ones(3)
        schedule.before_update()
        before = weight.detach().clone()
        optimizer.step()
        moved.append(float((before - weight.detach())[0]))
    assert moved == pytest.approx([lr_at(1e-3, 4, n) for n in range(1, 7)], rel=1e-4)


def test_a_wrapper_that_holds_its_optimizer_gets_the_rate_set_on_the_inner_groups():
    # DeepSpeed's bf16 optimizer holds torch's as .optimizer and has no param_groups of its own
    inner = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    wrapper = type("Bf16Like", (), {"optimizer": inner})()
    schedule = LrSchedule(wrapper, peak=2e-4, warmup=2)
    schedule.before_update()
    assert inner.param_groups[0]["lr"] == pytest.approx(1e-4)
    assert LrSchedule(wrapper, 2e-4, 2, enabled=False).describe()["schedule"].startswith("the DeepSpeed")
    with pytest.raises(TypeError, match="no parameter groups"):
        LrSchedule(object(), 1e-3, 2)
