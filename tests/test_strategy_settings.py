"""The strategies' own settings (config/strategy_settings.py, config/deepspeed_user.py): the defaults
DeepSpeed's guidance gives each model size, the axes that sweep them, a user's DeepSpeed config
merged over them and refused where it sets what the suite controls, and what result.json records.
One in-process session trains a few of them; the rest needs no training.
"""

from __future__ import annotations

import json

import pytest
import torch

from conftest import saved_results
from llmbench_pytest.config import strategy_settings
from llmbench_pytest.config.hardware import Hardware
from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.config.spec import STRATEGIES, RunSpec, SpecError
from llmbench_pytest.launch.matrix import build_matrix
from llmbench_pytest.launch.technique_axes import technique_combos
from llmbench_pytest.worker.strategies.deepspeed_zero import build_config, zero_settings

CPU = Hardware(device="cpu", cpu_cores=2)
GPU = torch.device("cuda")  # build_config only reads the device's type: no GPU is touched


def spec(strategy: str = "zero3", model: str = "llama-7b", **fields: object) -> RunSpec:
    return RunSpec(
        strategy=strategy, model=model, seq_len=128, per_device_batch=1, steps=3, warmup=1,
        dtype="bf16", world_size=4, **fields,
    )  # fmt: skip


def zero(run: RunSpec, hidden: int = 4096) -> dict:
    return build_config(run, hidden, GPU)["zero_optimization"]


def test_zero3_follows_deepspeeds_guidance_at_7b_and_scales_it_down_for_a_tiny_model():
    # DeepSpeed's autotuner ZeRO-3 template and config docs: buckets and prefetch 5e8, persistence 1e6
    big = zero(spec())
    assert (big["reduce_bucket_size"], big["allgather_bucket_size"]) == (500_000_000, 500_000_000)
    assert big["stage3_prefetch_bucket_size"] == 500_000_000
    assert big["stage3_param_persistence_threshold"] == 1_000_000
    # llama-tiny, 1,328,256 parameters: no buffer beyond the model, only its norms (128) kept whole
    tiny = zero(spec(model="llama-tiny"), hidden=128)
    assert tiny["reduce_bucket_size"] == tiny["stage3_prefetch_bucket_size"] == 1_328_256
    assert tiny["stage3_param_persistence_threshold"] == 1328
    assert 128 < tiny["stage3_param_persistence_threshold"] < 128 * 128


def test_zero1_and_2_keep_the_hidden_squared_bucket():
    for strategy in ("zero1", "zero2"):
        settings = zero(spec(strategy))
        assert settings["reduce_bucket_size"] == settings["allgather_bucket_size"] == 4096 * 4096
        assert "stage3_prefetch_bucket_size" not in settings


def test_an_axis_value_replaces_the_default_and_says_so():
    run = spec(zero_bucket="hf_auto", zero3_prefetch="5e7", zero3_persistence="0")
    settings = zero_settings(run, 3, 4096, 6_738_415_616)
    assert settings["reduce_bucket_size"] == {"value": 4096 * 4096, "from": "axis"}
    assert settings["stage3_prefetch_bucket_size"] == {"value": 50_000_000, "from": "axis"}
    assert settings["stage3_param_persistence_threshold"] == {"value": 0, "from": "axis"}
    assert zero(run)["stage3_param_persistence_threshold"] == 0


def test_the_users_file_is_merged_under_the_axes(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": "auto",
                "bf16": {"enabled": "auto"},
                "zero_optimization": {"reduce_bucket_size": 2e8, "stage3_max_live_parameters": 3e8},
                "gradient_clipping": 1.0,
            }
        )
    )
    given = SessionOptions().with_values({"deepspeed_config": str(path)}, "command line").deepspeed_config
    assert given is not None
    run = spec(deepspeed_config=given[1], deepspeed_config_file=given[0])
    config = build_config(run, 4096, GPU)
    assert config["zero_optimization"]["reduce_bucket_size"] == 200_000_000  # "2e8" read as a count
    assert config["zero_optimization"]["stage3_max_live_parameters"] == 300_000_000
    assert config["gradient_clipping"] == 1
    assert config["train_micro_batch_size_per_gpu"] == 1 and config["bf16"] == {"enabled": True}
    assert zero_settings(run, 3, 4096, 6_738_415_616)["reduce_bucket_size"]["from"] == str(path)
    # an axis off its default is the most specific: it wins over the file
    assert zero(run.replace(zero_bucket="1e8"))["reduce_bucket_size"] == 100_000_000


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"train_micro_batch_size_per_gpu": 4},
            "--llmbench-deepspeed-config: ds.json sets train_micro_batch_size_per_gpu=4, which the suite "
            "controls (--llmbench-batch, --llmbench-grad-accum and the world size decide it): remove "
            '"train_micro_batch_size_per_gpu" from the file or write "auto"',
        ),
        (
            {"bf16": {"enabled": True}},
            "--llmbench-deepspeed-config: ds.json sets bf16.enabled=true, which the suite controls "
            '(--llmbench-dtype decides it): remove "enabled" from the file or write "auto"',
        ),
        (
            {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}},
            "*sets zero_optimization.offload_optimizer=*the strategy's name decides it: zero2_offload*",
        ),
        ({"optimizer": {"type": "Adam"}}, "*same AdamW: --llmbench-optimizer and --llmbench-lr*"),
        ([1, 2], "*holds a JSON list, not an object of DeepSpeed settings: give an object"),
        ("{not json", "*is not valid JSON (line 1, column 2: *): fix the file or drop the option"),
    ],
)
def test_a_file_that_sets_what_the_suite_controls_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "ds.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(SpecError) as refused:
        SessionOptions().with_values({"deepspeed_config": str(path)}, "command line")
    assert "\n" not in str(refused.value)
    assert refused.match(message.replace("(", r"\(").replace(")", r"\)").replace("*", ".*"))


def test_a_file_that_cannot_be_read_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"^--llmbench-deepspeed-config: '.*absent.json' cannot be read "):
        SessionOptions().with_values({"deepspeed_config": str(tmp_path / "absent.json")}, "command line")


def test_a_stage_in_the_file_must_be_every_deepspeed_strategys(tmp_path):
    path = tmp_path / "z3.json"
    path.write_text('{"zero_optimization": {"stage": 3}}')
    opts = SessionOptions().with_values({"deepspeed_config": str(path)}, "command line")
    with pytest.raises(SpecError) as refused:
        build_matrix(opts.with_values({"strategies": "ddp,zero2,zero3"}, "command line"), CPU, [1])
    assert str(refused.value) == (
        "--llmbench-deepspeed-config z3.json sets zero_optimization.stage=3 but zero2 runs stage 2: "
        'remove "stage" from the file (each strategy sets its own) or select only zero3 strategies'
    )
    entries = build_matrix(opts.with_values({"strategies": "ddp,zero3"}, "command line"), CPU, [1])
    assert [e.spec.deepspeed_config_file for e in entries] == [None, str(path)]


def test_each_axis_sweeps_the_strategies_it_applies_to_only():
    opts = SessionOptions().with_values(
        {"strategies": "ddp,fsdp,zero2,zero3", "zero_bucket": "default,hf_auto", "ddp_bucket_mb": "100"},
        "command line",
    )
    ids = [e.id for e in build_matrix(opts, CPU, [2])]
    assert ids == [
        "ddp-ws2-seq128-llama-tiny-ddpbucket_100",
        "fsdp-ws2-seq128-llama-tiny",
        "zero2-ws2-seq128-llama-tiny-bucket_default",
        "zero2-ws2-seq128-llama-tiny-bucket_hf_auto",
        "zero3-ws2-seq128-llama-tiny-bucket_default",
        "zero3-ws2-seq128-llama-tiny-bucket_hf_auto",
    ]
    fields = dict(technique_combos(opts, STRATEGIES["zero3"]))["-bucket_hf_auto"]
    assert fields["zero_bucket"] == "hf_auto" and "ddp_bucket_mb" not in fields  # ddp's, at its default


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "zero_bucket",
            "0",
            "--llmbench-zero-bucket: must be default, hf_auto or a number of elements above 0",
        ),
        (
            "zero3_persistence",
            "-1",
            "*persistence: must be default, hf_auto or a number of elements, 0 or more*",
        ),
        ("zero_bucket", "1.5", "--llmbench-zero-bucket: must be default, hf_auto or a whole number*"),
        ("ddp_bucket_mb", "hf_auto", "--llmbench-ddp-bucket-mb: must be default or a number of MB above 0*"),
    ],
)
def test_a_bad_setting_value_names_the_option(option, value, message):
    with pytest.raises(SpecError) as refused:
        SessionOptions().with_values({option: value}, "command line")
    assert refused.match(message.replace("*", ".*"))


def test_counts_read_as_a_user_writes_them():
    axis = strategy_settings.BY_FIELD["zero_bucket"]
    assert strategy_settings.axis_values(axis, "5e8, 500000000,2.5e7 ,default") == ("5e8", "25e6", "default")
    assert strategy_settings.axis_values(strategy_settings.BY_FIELD["zero3_persistence"], "0") == ("0",)


def test_result_records_the_settings_each_strategy_ran_with(bench):
    """In-process, world size 1: zero3 at its defaults and at the Hugging Face buckets under a
    user's file, ddp at a 50 MB bucket, fsdp as it wraps."""
    config = bench.path / "mine.json"
    config.write_text(
        '{"zero_optimization": {"stage3_max_reuse_distance": 5e8, "reduce_bucket_size": "auto"}}\n'
    )
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=zero3,ddp,fsdp",
        "--llmbench-zero-bucket=default,hf_auto",
        "--llmbench-ddp-bucket-mb=50",
        f"--llmbench-deepspeed-config={config}",
        "--llmbench-warmup=1",
        "--llmbench-steps=2",
        "-v",
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_pretrain?zero3-ws1-seq128-llama-tiny-bucket_hf_auto? PASSED*"])
    runs = {(r["strategy"], r["settings_variant"]): r for r in saved_results(bench.path)}
    assert set(runs) == {
        ("zero3", "dsconfig_mine"),  # the bucket axis at its default: no variant
        ("zero3", "bucket_hf_auto-dsconfig_mine"),
        ("ddp", "ddpbucket_50"),
        ("fsdp", ""),
    }
    default, hf = runs["zero3", "dsconfig_mine"], runs["zero3", "bucket_hf_auto-dsconfig_mine"]
    assert default["settings"]["reduce_bucket_size"] == {"value": 1_328_256, "from": "default"}
    assert hf["settings"]["reduce_bucket_size"] == {"value": 128 * 128, "from": "axis"}
    ran = hf["strategy_config"]["deepspeed_config"]["zero_optimization"]
    assert ran["stage3_max_reuse_distance"] == 500_000_000 and ran["reduce_bucket_size"] == 128 * 128
    assert hf["config"]["run"]["deepspeed_config_file"] == str(config)
    assert runs["ddp", "ddpbucket_50"]["settings"] == {"bucket_cap_mb": {"value": 50.0, "from": "axis"}}
    assert runs["fsdp", ""]["settings"]["root_reshard_after_forward"]["value"] is False
