"""RunSpec and option parsing: bad values are refused with the field, the value and the fix."""

import pytest

from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.config.spec import DEFAULT_STRATEGIES, RunSpec, SpecError, parse_strategy


def spec(**kw):
    base = dict(
        strategy="ddp", model="llama-tiny", seq_len=128, per_device_batch=2, steps=3, warmup=1, dtype="fp32"
    )
    base.update(kw)
    return RunSpec(**base)


def test_every_default_strategy_parses():
    for name in DEFAULT_STRATEGIES:
        info, offload = parse_strategy(name)
        assert info.name + {"none": "", "cpu": "_offload", "nvme": "_nvme"}[offload] == name


def test_unknown_strategy_lists_the_choices():
    with pytest.raises(SpecError, match=r"unknown strategy 'zero4': choose from ddp, fsdp, .*zero3_nvme"):
        parse_strategy("zero4")


@pytest.mark.parametrize("name", ["ddp_offload", "fsdp_offload", "zero0_offload", "zero2_nvme"])
def test_offload_where_it_cannot_happen_is_refused(name):
    with pytest.raises(SpecError, match=r"cannot offload .*Strategies that can: .*Drop the"):
        parse_strategy(name)


@pytest.mark.parametrize("field", ["steps", "per_device_batch", "seq_len", "grad_accum", "world_size"])
@pytest.mark.parametrize("value", [0, -1])
def test_counts_must_be_positive(field, value):
    with pytest.raises(SpecError, match=rf"{field} must be a whole number of at least 1; got {value}"):
        spec(**{field: value})


def test_nvme_needs_a_path():
    with pytest.raises(SpecError, match="zero3_nvme needs a directory: pass --llmbench-nvme-path"):
        spec(strategy="zero3", offload="nvme")


def test_tokens_per_step_counts_every_rank_and_micro_step():
    s = spec(world_size=4, per_device_batch=2, grad_accum=3, seq_len=128)
    assert s.tokens_per_step == 4 * 2 * 3 * 128
    assert s.name == "ddp"
    assert spec(strategy="zero3", offload="cpu").name == "zero3_offload"


def test_spec_round_trips_through_a_dict():
    s = spec(strategy="zero2", offload="cpu", grad_ckpt=True)
    assert RunSpec.from_dict(s.to_dict()) == s


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"steps": "0"}, "--llmbench-steps: must be 1 or more; got 0"),
        ({"batch": "two"}, "--llmbench-batch: must be a whole number; got 'two'"),
        ({"dtype": "bf8"}, "--llmbench-dtype: must be one of auto, bf16, fp16, fp32; got 'bf8'"),
        ({"max_cv": "-3"}, "--llmbench-max-cv: must be a number above 0"),
        (
            {"min_scaling": "60"},
            "--llmbench-min-scaling: must be at most 1 (100 percent); got '60': write 0.6 or 60%",
        ),
        ({"max_interval": "x"}, "--llmbench-max-interval: must be a number; got 'x'"),
        ({"strategies": "ddp,nope"}, "--llmbench-strategies: unknown strategy 'nope'"),
    ],
)
def test_option_errors_name_the_option(values, message):
    with pytest.raises(SpecError) as err:
        SessionOptions().with_values(values, "command line")
    assert message in str(err.value)


def test_percent_and_fraction_both_mean_a_fraction():
    assert SessionOptions().with_values({"max_cv": "10%"}, "ini").max_cv == pytest.approx(0.10)
    assert SessionOptions().with_values({"max_cv": "0.25"}, "ini").max_cv == pytest.approx(0.25)
    assert SessionOptions().with_values({"min_scaling": "60%"}, "ini").min_scaling == pytest.approx(0.60)
    assert SessionOptions().with_values({"max_interval": "0.05"}, "ini").max_interval == pytest.approx(0.05)


def test_all_expands_to_every_strategy_and_offload_variant():
    names = SessionOptions().with_values({"strategies": "all"}, "ini").strategies
    assert {"ddp", "fsdp", "zero3", "zero1_offload", "zero3_nvme"} <= set(names)
