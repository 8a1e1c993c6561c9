"""The default learning rate follows the model's size for pre-training (GPT-3's table), so that a 7B
model's loss falls as it would in a real run; LoRA and the encoder-decoder keep 1e-3, and
--llmbench-lr sets any rate."""

from __future__ import annotations

import math

import pytest

from llmbench_pytest.config.hardware import Hardware
from llmbench_pytest.config.learning_rate import (
    GPT3_PEAK_LR,
    SMALL_MODEL_LR,
    default_lr,
    pretraining_lr,
)
from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.config.presets import estimated_params, model_names, resolve_model
from llmbench_pytest.launch.matrix import build_matrix

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
