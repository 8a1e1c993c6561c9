"""The what-if axes of the matrix: --llmbench-fused-loss, --llmbench-fp8, --llmbench-attention, and
the strategies' own settings (--llmbench-zero-bucket and the others of config/strategy_settings.py).

Standard library only. Each axis takes one value or several; every combination is its own
configuration, named in the test id where the axis is not at its default or varies
(`ddp-ws1-seq128-llama-tiny-loss_chunked-fp8_tensorwise`), so `-k loss_chunked` selects it.
What this machine cannot run, as far as it is known without torch (no GPU, a package missing, a
GPU too old for fp8, ZeRO-3 under Liger), is skipped here with the reason; what only the run's
device can tell (an SDPA backend for this GPU and dtype) the worker probes, and skips there.
"""

from __future__ import annotations

import importlib.util
import itertools
from typing import TYPE_CHECKING, Any

from ..config import deepspeed_user, strategy_settings
from ..config.spec import SpecError, fp8_needs_compile

if TYPE_CHECKING:
    from ..config.hardware import Hardware
    from ..config.options import SessionOptions
    from ..config.presets import ModelPreset
    from ..config.spec import StrategyInfo

AXES = (("fused_loss", "loss", "none"), ("fp8", "fp8", "none"), ("attention", "attn", "default"))
"""(RunSpec field, test-id prefix, default)."""
DECODER_WORKLOADS = ("causal_lm", "lora")
FP8_CAPABILITY = (8, 9)


def technique_combos(
    opts: SessionOptions, info: StrategyInfo | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(test-id suffix, RunSpec fields) for every combination the session asks for: the technique
    axes for every strategy, and the strategy settings' axes (config/strategy_settings.py) that
    apply to `info`'s (the others at their defaults), with the user's DeepSpeed config for a
    DeepSpeed strategy."""
    settings = [a for a in strategy_settings.AXES if info is not None and a.applies(info)]
    axes = [*AXES, *((a.field, a.prefix, strategy_settings.DEFAULT) for a in settings)]
    values = [getattr(opts, field) for field, _, _ in axes]
    given = opts.deepspeed_config if info is not None and info.family == "deepspeed" else None
    user = {"deepspeed_config_file": given[0], "deepspeed_config": given[1]} if given else {}
    out = []
    for combo in itertools.product(*values):
        parts = [
            f"-{prefix}_{value}"
            for (field, prefix, default), value in zip(axes, combo, strict=True)
            if value != default or len(getattr(opts, field)) > 1
        ]
        fields = {field: value for (field, _, _), value in zip(axes, combo, strict=True)}
        out.append(("".join(parts), {**fields, **user}))
    return out


def check_technique_options(opts: SessionOptions, hw: Hardware) -> None:
    """Refuse, before anything trains, what no machine should run: fp8 without compile on a GPU, a
    DeepSpeed config whose stage is not every selected DeepSpeed strategy's."""
    deepspeed_user.check_stage(opts.deepspeed_config, opts.strategies)
    recipes = [r for r in opts.fp8 if r != "none"]
    if recipes and hw.device == "cuda" and not opts.compile:
        raise SpecError(fp8_needs_compile(",".join(recipes)))


def technique_skip(
    fields: dict[str, str], info: StrategyInfo, workload: str, preset: ModelPreset, hw: Hardware
) -> str | None:
    """Why this combination cannot run here (a skip reason), or None."""
    if all(fields[f] == d for f, _, d in AXES):  # the settings' axes apply to every workload
        return None
    if workload not in DECODER_WORKLOADS:
        return (
            f"the technique axes apply to the decoder workloads ({', '.join(DECODER_WORKLOADS)}); the "
            f"{workload} benchmark runs at their defaults"
        )
    return (
        _loss_skip(fields["fused_loss"], info, preset, hw)
        or _fp8_skip(fields["fp8"], hw)
        or _attention_skip(fields["attention"], hw)
    )


def _model_type(preset: ModelPreset) -> Any:
    return preset.config.get("model_type") if preset.architecture == "auto" else preset.architecture


def _loss_skip(kind: str, info: StrategyInfo, preset: ModelPreset, hw: Hardware) -> str | None:
    if kind != "liger":
        return None
    if hw.device != "cuda":
        return "liger-kernel runs Triton kernels: needs a CUDA GPU (this session trains on CPU)"
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel is not installed: pip install liger-kernel"
    if info.zero_stage == 3:
        return (
            "liger's fused loss reads lm_head's weight outside lm_head's forward, where ZeRO-3 has not "
            "gathered it: use --llmbench-fused-loss=chunked with ZeRO-3"
        )
    model_type = _model_type(preset)
    if model_type not in ("llama", "mistral"):
        return f"liger's fused loss is wired for llama and mistral models; {preset.name} is {model_type}"
    return None


def _fp8_skip(recipe: str, hw: Hardware) -> str | None:
    if recipe == "none":
        return None
    if importlib.util.find_spec("torchao") is None:
        return "float8 training needs torchao: pip install torchao"
    cc = hw.compute_capability
    if hw.device == "cuda" and cc is not None and cc < FP8_CAPABILITY:
        return (
            f"float8 matmuls need compute capability 8.9 or more (H100, H200, L40S, L4, RTX 4090); "
            f"{hw.gpu_name} is {cc[0]}.{cc[1]}"
        )
    return None


def _attention_skip(backend: str, hw: Hardware) -> str | None:
    if hw.device != "cuda" and backend in ("cudnn", "efficient", "fa2"):
        what = {"cudnn": "SDPA's cuDNN backend", "efficient": "SDPA's memory-efficient backend"}
        return f"{what.get(backend, 'FlashAttention-2')} runs on CUDA GPUs only (this session trains on CPU)"
    if backend == "fa2" and importlib.util.find_spec("flash_attn") is None:
        return (
            "FlashAttention-2 needs the flash-attn package, built for this torch and CUDA: "
            "pip install flash-attn"
        )
    return None
