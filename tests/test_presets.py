"""Presets build the sizes they claim, from configs alone, and GPU peaks resolve by name."""

import json

import pytest
import torch

from llmbench_pytest.config.presets import gpu_peak, model_names, resolve_model, tier_for_memory
from llmbench_pytest.config.spec import SpecError
from llmbench_pytest.worker.models import _config, matmul_params


@pytest.mark.parametrize("name", model_names())
def test_preset_builds_its_recorded_parameter_count(name):
    from transformers import AutoModelForCausalLM

    from llmbench_pytest.worker import seq2seq

    preset = resolve_model(name)
    with torch.device("meta"):  # shapes only: even the 7B preset builds in milliseconds
        if preset.architecture == "encdec":
            model = seq2seq.build_module(preset.config)
            matmuls = seq2seq.matmul_params(model)
        else:
            model = AutoModelForCausalLM.from_config(_config(preset))
            matmuls = matmul_params(model)
    assert sum(p.numel() for p in model.parameters()) == preset.params
    assert 0 < matmuls < preset.params


def test_llama_sizes_are_what_their_names_say():
    sizes = {
        n: resolve_model(n).params for n in ("llama-125m", "llama-350m", "llama-1b", "llama-3b", "llama-7b")
    }
    assert sizes["llama-125m"] == pytest.approx(125e6, rel=0.1)
    assert sizes["llama-350m"] == pytest.approx(350e6, rel=0.1)
    assert sizes["llama-1b"] == pytest.approx(1e9, rel=0.1)
    assert sizes["llama-3b"] == pytest.approx(3e9, rel=0.15)
    assert sizes["llama-7b"] == pytest.approx(7e9, rel=0.1)


def test_encoder_decoder_sizes_are_what_their_names_say():
    for name, size in (("encdec-3m", 3.5e6), ("encdec-50m", 50e6), ("encdec-200m", 200e6)):
        assert resolve_model(name).params == pytest.approx(size, rel=0.1), name
    assert resolve_model("encdec-3m").max_seq_len == 512


def test_unknown_model_is_refused_with_the_choices():
    with pytest.raises(
        SpecError, match=r"unknown model 'llama-9b': choose a preset \(llama-tiny, .*nothing is downloaded"
    ):
        resolve_model("llama-9b")


def test_local_config_file_and_directory(tmp_path):
    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
    ).save_pretrained(tmp_path)
    by_dir = resolve_model(str(tmp_path))
    by_file = resolve_model(str(tmp_path / "config.json"))
    assert by_dir.config == by_file.config
    assert by_dir.max_seq_len == 64
    assert by_dir.architecture == "auto"


def test_local_file_that_is_not_a_config(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden": 1}))
    with pytest.raises(SpecError, match="has no 'model_type'"):
        resolve_model(str(bad))
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="is not readable JSON"):
        resolve_model(str(bad))


@pytest.mark.parametrize(
    ("device", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.4),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A10", 125.0),
    ],
)
def test_gpu_peaks_match_the_datasheets(device, tflops):
    peak = gpu_peak(device, "bf16")
    assert peak is not None and peak.tflops == tflops and "datasheet" in peak.source


def test_unknown_gpu_gets_no_peak():
    assert gpu_peak("NVIDIA A10G", "bf16") is None  # not "A10": never another GPU's figure
    assert gpu_peak("Some Future GPU", "bf16") is None


def test_tiers_by_device_memory():
    assert tier_for_memory(None).name == "A"
    assert tier_for_memory(23.6).name == "A"
    assert tier_for_memory(79.2).name == "B"
