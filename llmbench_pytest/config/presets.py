"""The suite's presets from fixtures/: model sizes, GPU peak throughput, resource tiers.

Standard library only. A model is either a preset name or a local transformers config
(a config.json file or a directory holding one); nothing is ever downloaded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .spec import SpecError

# The encoder-decoder's config (the encoder-decoder benchmark's flags, a vocabulary and a position
# table): the plugin checks these before any rank starts, the worker builds the model from them.
ENCDEC_CONFIG_KEYS = (
    "vocab_size",
    "d_model",
    "nhead",
    "num_encoder_layers",
    "num_decoder_layers",
    "dim_feedforward",
    "max_len",
)

# Config keys that bound the sequence length, by architecture family.
_MAX_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "max_len")


@functools.cache
def _load(name: str) -> dict[str, Any]:
    data = resources.files("llmbench_pytest.fixtures").joinpath(name).read_text()
    return tomllib.loads(data)


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """A model the suite can build without downloading anything."""

    name: str
    architecture: str
    """Family of config class: llama, gpt2, mistral, encdec (the encoder-decoder benchmark's model,
    built by worker/seq2seq.py), or auto (a local config.json read by AutoConfig)."""
    config: dict[str, Any]
    """Keyword arguments for the config class (for a local file: its parsed contents)."""
    seq_len: int
    batch: int
    params: int | None = None
    """Parameter count the config builds (recorded in models.toml, checked by the tests)."""
    path: str | None = None
    """The local config file, when the model came from one."""

    def with_overrides(self, overrides: dict[str, Any] | tuple[tuple[str, Any], ...]) -> ModelPreset:
        """The preset with some config values replaced (--llmbench-model-config); unknown keys are
        refused with the known ones, since a config class would accept a typo silently."""
        pairs = dict(overrides)
        if not pairs:
            return self
        unknown = [k for k in pairs if k not in self.config]
        if unknown:
            raise SpecError(
                f"--llmbench-model-config: {', '.join(map(repr, unknown))} not in {self.name}'s config; "
                f"known: {', '.join(sorted(self.config))}."
            )
        return dataclasses.replace(self, config={**self.config, **pairs}, params=None)

    @property
    def max_seq_len(self) -> int | None:
        for key in _MAX_POSITION_KEYS:
            if key in self.config:
                return int(self.config[key])
        return None


def model_names() -> list[str]:
    return [k for k in _load("models.toml") if k != "defaults"]


def default_model(workload: str, device: str) -> str | None:
    """The preset a workload defaults to on this device, or None for the tier's choice."""
    defaults = _load("models.toml")["defaults"]
    return defaults.get(f"{workload}_{device}") or (defaults["cpu"] if device == "cpu" else None)


def resolve_model(name_or_path: str, overrides: tuple[tuple[str, Any], ...] = ()) -> ModelPreset:
    """A preset by name, or a local config file/directory, with config overrides applied."""
    return _resolve(name_or_path).with_overrides(overrides)


def _resolve(name_or_path: str) -> ModelPreset:
    """A preset by name, or a local config file/directory. Errors name the choices."""
    table = _load("models.toml")
    if name_or_path in table and name_or_path != "defaults":
        entry = table[name_or_path]
        return ModelPreset(
            name=name_or_path,
            architecture=entry["architecture"],
            config=dict(entry["config"]),
            seq_len=int(entry["seq_len"]),
            batch=int(entry["batch"]),
            params=entry.get("params"),
        )
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            config = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SpecError(f"model config {str(path)!r} is not readable JSON ({exc}).") from exc
        if not isinstance(config, dict) or "model_type" not in config:
            raise SpecError(
                f"model config {str(path)!r} has no 'model_type': give a transformers config.json "
                "(as written by PretrainedConfig.save_pretrained)."
            )
        stem = path.parent.name if path.name == "config.json" else path.stem
        return ModelPreset(
            name=stem or "custom",
            architecture="auto",
            config=config,
            seq_len=min(1024, int(_first(config, _MAX_POSITION_KEYS, 1024))),
            batch=1,
            path=str(path.resolve()),
        )
    raise SpecError(
        f"unknown model {name_or_path!r}: choose a preset ({', '.join(model_names())}) "
        "or give a local config.json file or directory (nothing is downloaded)."
    )


def _first(config: dict[str, Any], keys: tuple[str, ...], default: Any) -> Any:
    for key in keys:
        if key in config:
            return config[key]
    return default


def params_of(preset: ModelPreset) -> int | None:
    """The model's parameter count: the one its preset records (models.toml, checked against what
    transformers builds by tests/test_presets.py), else estimated from its config's shapes."""
    return preset.params or estimated_params(preset.config)


def estimated_params(config: dict[str, Any]) -> int | None:
    """A model's parameter count from its config, for one whose count is not recorded (a local
    config.json, or a preset with --llmbench-model-config): each layer's attention (query and output
    H^2 each, key and value H^2 times the share of key-value heads; an encoder-decoder's decoder
    layers attend twice) and MLP (3 H I gated, as Llama's, else 2 H I), and the embedding, counted
    twice where the LM head is not tied to it (an encoder-decoder: source and target). Within 7% of
    the recorded counts of every preset (tests/test_learning_rate.py). None without the shapes."""

    def size(*keys: str) -> int:
        value = _first(config, keys, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    hidden, vocab = size("hidden_size", "n_embd", "d_model"), size("vocab_size")
    gated = "intermediate_size" in config  # Llama and Mistral: gate, up and down projections
    inner = size("intermediate_size", "n_inner", "dim_feedforward") or 4 * hidden
    heads = size("num_attention_heads", "n_head", "nhead") or 1
    attention = (2 + 2 * (size("num_key_value_heads") or heads) / heads) * hidden * hidden
    mlp = (3 if gated else 2) * hidden * inner
    encoder, decoder = size("num_encoder_layers"), size("num_decoder_layers")
    if encoder or decoder:
        layers, embeddings = encoder * (attention + mlp) + decoder * (2 * attention + mlp), 2
    else:
        layers = size("num_hidden_layers", "n_layer", "num_layers") * (attention + mlp)
        embeddings = 1 if config.get("tie_word_embeddings", not gated) else 2  # GPT-2 ties its head
    if not (hidden and vocab and layers):
        return None
    return int(layers + embeddings * vocab * hidden)


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    description: str
    vram_limit_gb: float
    gpu_model: str
    min_device_gib: float


def tiers() -> dict[str, Tier]:
    return {
        name: Tier(
            name=name,
            description=t["description"],
            vram_limit_gb=float(t["vram_limit_gb"]),
            gpu_model=t["gpu_model"],
            min_device_gib=float(t.get("min_device_gib", 0)),
        )
        for name, t in _load("tiers.toml").items()
    }


def tier_for_memory(device_gib: float | None) -> Tier:
    """The highest tier whose minimum device memory this device meets (CPU: the lowest)."""
    ordered = sorted(tiers().values(), key=lambda t: t.min_device_gib)
    chosen = ordered[0]
    for tier in ordered:
        if device_gib is not None and device_gib >= tier.min_device_gib:
            chosen = tier
    return chosen


@dataclass(frozen=True, slots=True)
class GpuPeak:
    name: str
    tflops: float
    source: str


def gpu_peak(device_name: str, dtype: str) -> GpuPeak | None:
    """Peak dense TFLOP/s for this GPU and dtype from fixtures/gpus.toml, or None if unknown."""
    for entry in _load("gpus.toml")["gpu"]:
        if re.search(entry["match"], device_name.strip()):
            if dtype not in entry:
                return None
            return GpuPeak(name=entry["name"], tflops=float(entry[dtype]), source=entry["source"])
    return None


def _sizes_gib(entry: dict[str, Any]) -> list[int]:
    """The memory sizes (GiB) a GPU of fixtures/gpus.toml is sold with: one, or a list (A100: 40, 80)."""
    sizes = entry["memory_gib"]
    return list(sizes) if isinstance(sizes, list) else [sizes]


def gpu_names_of(entry: dict[str, Any]) -> list[str]:
    """What `--gpu` takes for one GPU of fixtures/gpus.toml: its name, with each size where it comes
    in several."""
    sizes = _sizes_gib(entry)
    return [entry["name"]] if len(sizes) == 1 else [f"{entry['name']} {size}GB" for size in sizes]


def gpu_names() -> list[str]:
    """The GPUs fixtures/gpus.toml names, in its order, each with its size where it comes in several
    (for messages that list the choices, and what `--gpu` takes)."""
    return [name for e in _load("gpus.toml")["gpu"] for name in gpu_names_of(e)]


_SIZE = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(gib|gb)?\s*$", re.IGNORECASE)
_STATED = re.compile(r"[\s_-]*\b(\d+)\s*gi?b\b", re.IGNORECASE)
"""A memory size within a GPU's name: "A100 40GB", "A100-SXM4-80GB", "A100 80GB PCIe" (torch's)."""


def gpu_memory(name_or_size: str) -> tuple[str, float]:
    """(name, memory in GB of 1e9 bytes) for a GPU named in fixtures/gpus.toml ("H100", "h200 nvl",
    "A100 40GB": the first entry whose name, or name and size, or pattern matches) or a size
    ("80GiB", "24GB"; a bare number is GB; a sign is kept, for the caller to refuse). A name sold with
    several memory sizes and given without one is refused, asking which (in the words of
    `llmbench plan --gpu`, its one caller)."""
    size = _SIZE.match(name_or_size)
    if size:
        value = float(size.group(1))
        binary = (size.group(2) or "gb").lower() == "gib"
        return (name_or_size.strip(), value * 2**30 / 1e9 if binary else value)
    text = name_or_size.strip()
    stated = _STATED.search(text)
    base = (text[: stated.start()] + text[stated.end() :]).strip(" _-") if stated else text
    entries = _load("gpus.toml")["gpu"]
    entry = next((e for e in entries if e["name"].lower() in (text.lower(), base.lower())), None)
    if entry is None:
        entry = next((e for e in entries if re.search(e["match"], text, re.IGNORECASE)), None)
    if entry is None:
        raise SpecError(
            f"unknown GPU {name_or_size!r}: give a size (80GiB, 24GB) or one of {', '.join(gpu_names())}."
        )
    sizes, name = _sizes_gib(entry), entry["name"]
    sold = " or ".join(f"{n} GB" for n in sizes)
    if stated and int(stated.group(1)) in sizes:
        size = int(stated.group(1))
        return (name, size * 2**30 / 1e9) if len(sizes) == 1 else (f"{name} {size}GB", size * 2**30 / 1e9)
    if stated:  # a size the part is not sold with: which did the user mean, the part or the size?
        raise SpecError(
            f"--gpu {name_or_size!r}: the {name} comes with {sold} of memory, "
            f"not {stated.group(1)} GB: give the part ({' or '.join(gpu_names_of(entry))}) or the memory "
            f"alone ({stated.group(1)}GiB)."
        )
    if len(sizes) == 1:
        return name, sizes[0] * 2**30 / 1e9
    raise SpecError(
        f"--gpu {name_or_size!r}: the {name} comes with {sold} of memory: say which, "
        f"{' or '.join(f'--gpu {chr(39)}{part}{chr(39)}' for part in gpu_names_of(entry))} (or give the "
        f"memory, {' or '.join(f'{n}GiB' for n in sizes)})."
    )
