"""Runs inside each rank: builds a transformers model from a config, with random weights.

A model here is a module plus what the loop and the metrics need from it: the loss for a batch,
the parameter count, the FLOPs per token (from the config, PaLM appendix B), and the class of
its repeated block (FSDP shards per block). Each workload (WORKLOADS) has its own builder and
loss: causal LMs from transformers configs, the same wrapped with LoRA adapters, and the
encoder-decoder benchmark's model (seq2seq.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..analysis.flops import FlopsModel
from .built import BuiltModel
from .device_init import HALF_DTYPES, on_device
from .lean_imports import skip_unused_imports
from .seq2seq import build_seq2seq
from .techniques import apply_techniques

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..config.presets import ModelPreset
    from ..config.spec import RunSpec


def _config(preset: ModelPreset) -> Any:
    if preset.architecture == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**preset.config)
    if preset.architecture == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(**preset.config)
    if preset.architecture == "mistral":
        from transformers import MistralConfig

        return MistralConfig(**preset.config)
    from transformers import AutoConfig

    # A local config file: AutoConfig picks the class from its model_type, nothing is downloaded.
    kwargs = {k: v for k, v in preset.config.items() if k != "model_type"}
    return AutoConfig.for_model(preset.config["model_type"], **kwargs)


def causal_lm_loss(module: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    # transformers shifts the labels inside; only the loss leaves this function, so the
    # logits (batch x seq x vocab) are freed before backward finishes
    return module(input_ids=input_ids, labels=input_ids, use_cache=False).loss


def matmul_params(module: nn.Module) -> int:
    """Parameters that take part in matrix products: all but embedding lookups.

    A tied LM head multiplies by the input embedding, so it counts once as a matmul.
    """
    embedding_ids = {id(m.weight) for m in module.modules() if isinstance(m, nn.Embedding)}
    total = sum(p.numel() for p in module.parameters() if id(p) not in embedding_ids)
    get_out = getattr(module, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    if head is not None and id(head.weight) in embedding_ids:
        total += head.weight.numel()
    return total


def build_causal_lm(
    spec: RunSpec, preset: ModelPreset, device: torch.device, dtype: torch.dtype | None = None
) -> BuiltModel:
    """`dtype`: the weights' precision (default fp32, the master weights mixed precision keeps)."""
    from transformers import AutoModelForCausalLM

    config = _config(preset)
    precision = {"dtype": dtype} if dtype is not None else {}
    with on_device(device, spec.seed):
        module = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", **precision)
    if spec.grad_ckpt:
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    module.train()

    n_params = sum(p.numel() for p in module.parameters())
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    flops = FlopsModel(
        n_params=n_params,
        matmul_params=matmul_params(module),
        layers=layers,
        heads=heads,
        head_dim=head_dim,
        seq_len=spec.seq_len,
    )
    block_names = set(getattr(module, "_no_split_modules", None) or ())
    blocks = tuple({type(m) for m in module.modules() if type(m).__name__ in block_names})
    return BuiltModel(
        module=module,
        loss=causal_lm_loss,
        vocab_size=int(config.vocab_size),
        flops=flops,
        block_classes=blocks,
        hidden_size=hidden,
        summary={
            "name": preset.name,
            "architecture": type(module).__name__,
            "config_path": preset.path,
            "params": n_params,
            "matmul_params": flops.matmul_params,
            "layers": layers,
            "hidden_size": hidden,
            "heads": heads,
            "head_dim": head_dim,
            "vocab_size": int(config.vocab_size),
            "flops_per_token": flops.per_token,
        },
    )


# LoRA targets by architecture: the attention projections, as the LoRA fine-tuning guide's recipe
# adapts them
_LORA_TARGETS = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mistral": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "gpt2": ["c_attn", "c_proj"],
}


def build_lora(spec: RunSpec, preset: ModelPreset, device: torch.device) -> BuiltModel:
    """A causal LM with peft LoRA adapters; the base weights are frozen.

    As fine-tuning recipes load it, the frozen base is kept in the 16-bit precision of the run
    (bf16/fp16: no fp32 master copy is needed for weights that never change), while peft keeps
    the small adapters in fp32 and autocast computes in 16-bit.
    """
    from peft import LoraConfig, get_peft_model

    # drawn in 16 bits directly: a 7B base never exists in fp32 (28 GB) on its way to bf16 (14 GB)
    built = build_causal_lm(spec, preset, device, dtype=HALF_DTYPES.get(spec.dtype))
    model_type = getattr(built.module.config, "model_type", preset.architecture)
    targets = _LORA_TARGETS.get(model_type, _LORA_TARGETS["llama"])
    config = LoraConfig(
        r=spec.lora_rank, lora_alpha=2 * spec.lora_rank, lora_dropout=0.0, target_modules=targets, bias="none"
    )
    module = get_peft_model(built.module, config)
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    base = built.flops.matmul_params
    built.flops = dataclasses.replace(built.flops, matmul_params=base + trainable, frozen_matmul_params=base)
    built.module = module
    built.summary.update(
        workload="lora",
        lora_rank=spec.lora_rank,
        lora_targets=targets,
        trainable_params=trainable,
        flops_per_token=built.flops.per_token,
    )
    return built


# Workload name -> builder. The pre-training benchmark uses "causal_lm".
WORKLOADS: dict[str, Callable[[RunSpec, ModelPreset, torch.device], BuiltModel]] = {
    "causal_lm": build_causal_lm,
    "lora": build_lora,
    "seq2seq": build_seq2seq,
}


def build_model(spec: RunSpec, preset: ModelPreset, device: torch.device) -> BuiltModel:
    return apply_techniques(WORKLOADS[spec.workload](spec, preset, device), spec, device)


def preload(spec: RunSpec, preset: ModelPreset) -> None:
    """Import what building and wrapping `spec` will import (the architecture's transformers
    modules, DeepSpeed), before a fresh process takes its first memory level. The level freezes
    what the process holds then (memory.fresh_level): the first run's collections and tensor
    census then walk what the run creates, not the million-odd objects of these imports (three
    paired runs of a fresh ddp-then-zero2 rank on the 2-core CI VM, 2026-11-26: 0.07 to 1.1 s of
    CPU less)."""
    skip_unused_imports()  # before any model class imports transformers' generation (lean_imports.py)
    if spec.workload in ("causal_lm", "lora"):
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        MODEL_FOR_CAUSAL_LM_MAPPING[type(_config(preset))]  # imports the model's module
    if spec.info.family == "deepspeed":
        import deepspeed  # noqa: F401
