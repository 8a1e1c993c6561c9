"""Runs inside each rank: the what-if techniques (fp8 linears, a fused loss, an attention kernel)
applied to a built model before the strategy wraps it.

The order is the one torchao and torchtitan require: build -> fp8 convert -> fused loss ->
(in the strategy's setup) compile the blocks -> shard or wrap -> optimizer. Converting after
compiling or sharding would leave the compiled graphs and the shards with the old modules.

What a technique cannot run on this device or install raises TechniqueUnavailable before
anything changes, and the run is skipped with that reason. Nothing global outlives a run: the
patches are per instance (Liger's fused loss only, never its process-wide cross_entropy), and
the process-wide switches a run needs (the SDPA backend, inductor's cache and precision flags)
are put back by Techniques.close(), which every strategy's close() calls. The Dynamo reset after
compiled runs (ranks that train many configurations would otherwise reach Dynamo's recompile
limit and silently run eagerly) is the rank's teardown's, worker/memory.release.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .chunked_loss import patch_causal_lm

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn

    from ..config.spec import RunSpec
    from .built import BuiltModel

SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}
"""--llmbench-attention values that select one torch.nn.attention.SDPBackend."""
_COMPUTE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LIGER_MODEL_TYPES = ("llama", "mistral")
"""Where Liger's instance-only fused loss is known to patch nothing global (rope, norm and SwiGLU
off): its llama and mistral entry points. Others have other side effects; not wired here."""


class TechniqueUnavailable(RuntimeError):
    """This device or install cannot run the requested technique: the run is skipped, not failed."""


@dataclass
class Techniques:
    """What was applied to one model, and how to undo what is process-wide."""

    summary: dict[str, Any] = field(default_factory=dict)
    """For result.json (model_info.techniques)."""
    fp8_all_gather: bool = False
    """FSDP2 all-gathers the fp8 weights: their scales are precomputed after each optimizer step."""
    undo: list[Callable[[], None]] = field(default_factory=list)

    def after_optimizer_step(self, model: nn.Module) -> None:
        """After every optimizer step: one all-reduce of the weights' amax for FSDP2's fp8 all-gather."""
        if self.fp8_all_gather:
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(model)

    def close(self) -> None:
        """Put back every process-wide switch; safe to call twice."""
        while self.undo:
            self.undo.pop()()


def close_techniques(built: BuiltModel | None) -> None:
    """For the strategies' close(): a run that never got its techniques has nothing to undo."""
    applied = getattr(built, "techniques", None)
    if applied is not None:
        applied.close()


def apply_techniques(built: BuiltModel, spec: RunSpec, device: torch.device) -> BuiltModel:
    """Apply the run's techniques in place (nothing to do at the defaults); see the module doc."""
    applied = Techniques()
    built.techniques = applied
    if (spec.fused_loss, spec.fp8, spec.attention) == ("none", "none", "default"):
        return built
    reason = unavailable(spec, device, built.summary.get("head_dim"))
    if reason:
        raise TechniqueUnavailable(reason)
    try:
        if spec.fp8 != "none":
            applied.summary["fp8"] = _convert_fp8(built, spec, device, applied)
        if spec.fused_loss != "none":
            applied.summary["fused_loss"] = _fuse_loss(built.module, spec)
        if spec.attention != "default":
            applied.summary["attention"] = _select_attention(built.module, spec, applied)
    except BaseException:
        applied.close()
        raise
    built.summary["techniques"] = applied.summary
    return built


def unavailable(spec: RunSpec, device: torch.device, head_dim: int | None) -> str | None:
    """Why this rank cannot run the run's techniques, found on its own device; None when it can."""
    if spec.fused_loss == "liger":
        reason = _liger_unavailable(device)
        if reason:
            return reason
    if spec.fp8 != "none" and device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (8, 9):
            return (
                f"float8 matmuls need compute capability 8.9 or more (H100, H200, L40S, L4, RTX 4090); "
                f"{torch.cuda.get_device_name(device)} is {major}.{minor}"
            )
    if spec.fp8 != "none" and importlib.util.find_spec("torchao") is None:
        return "float8 training needs torchao: pip install torchao"
    if spec.attention in SDPA_BACKENDS:
        return sdpa_unavailable(spec.attention, device, _COMPUTE_DTYPES[spec.dtype], head_dim or 64)
    if spec.attention == "fa2" and importlib.util.find_spec("flash_attn") is None:
        return "FlashAttention-2 needs the flash-attn package, built for this torch: pip install flash-attn"
    return None


def _liger_unavailable(device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"liger-kernel runs Triton kernels: needs a CUDA GPU (this run is on {device.type})"
    try:
        import liger_kernel.transformers  # noqa: F401
    except ImportError as exc:
        return f"liger-kernel does not import here ({exc}): pip install liger-kernel"
    return None


def sdpa_unavailable(name: str, device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """A tiny causal forward and backward under that backend alone, on the run's device and dtype."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, SDPA_BACKENDS[name])
    q = torch.randn(1, 2, 128, head_dim, device=device, dtype=dtype, requires_grad=True)
    try:
        with sdpa_kernel(backend):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"SDPA backend {name!r} cannot run on {device.type} ({dtype}, head_dim {head_dim}): {first}"
    return None


def _causal_lm(module: nn.Module) -> nn.Module:
    """The transformers model under a PEFT wrapper (patching the PeftModel would patch the wrong forward)."""
    get_base = getattr(module, "get_base_model", None)
    return get_base() if callable(get_base) else module


def _fp8_filter(mod: nn.Module, fqn: str) -> bool:
    """The blocks' linear layers: not the LM head (its logits feed the loss and stay 16-bit, as
    torchtitan keeps `output`), not LoRA's tiny adapters, and only shapes fp8 GEMMs take."""
    return (
        isinstance(mod, torch.nn.Linear)
        and "lm_head" not in fqn
        and "lora_" not in fqn
        and mod.in_features % 16 == 0
        and mod.out_features % 16 == 0
    )


def _convert_fp8(
    built: BuiltModel, spec: RunSpec, device: torch.device, applied: Techniques
) -> dict[str, Any]:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(spec.fp8)
    # FSDP2 then all-gathers the weights in fp8 (half the bytes); tensorwise scaling only
    all_gather = spec.info.family == "fsdp" and spec.fp8 == "tensorwise"
    emulate = device.type != "cuda"  # CPU: fp8 matmuls emulated in fp32, a smoke test of the path
    config = dataclasses.replace(config, enable_fsdp_float8_all_gather=all_gather, emulate=emulate)
    if spec.fp8 == "rowwise":
        # as torchtitan does for rowwise scaling under compile (pytorch/pytorch#150859)
        _set_flag(applied, torch._inductor.config, "emulate_precision_casts", True)
    convert_to_float8_training(built.module, module_filter_fn=_fp8_filter, config=config)
    layers = sum(type(m).__name__ == "Float8Linear" for m in built.module.modules())
    if not layers:
        raise TechniqueUnavailable(f"no linear layer of {built.summary.get('name')} can take fp8 GEMMs")
    applied.fp8_all_gather = all_gather
    return {
        "recipe": spec.fp8,
        "layers": layers,
        "kept_16bit": ["lm_head"],
        "emulated": emulate,
        "fsdp_float8_all_gather": all_gather,
    }


def _fuse_loss(module: nn.Module, spec: RunSpec) -> dict[str, Any]:
    model = _causal_lm(module)
    if spec.fused_loss == "chunked":
        rows = patch_causal_lm(model, compiled=spec.compile)
        return {"kind": "chunked", "chunk_rows": rows, "compiled": spec.compile}
    model_type = getattr(model.config, "model_type", None)
    if model_type not in LIGER_MODEL_TYPES:
        raise TechniqueUnavailable(
            f"liger's fused loss is wired here for {' and '.join(LIGER_MODEL_TYPES)} models; this one is "
            f"{model_type!r}: use --llmbench-fused-loss=chunked"
        )
    from liger_kernel.transformers import apply_liger_kernel_to_llama, apply_liger_kernel_to_mistral

    patch = apply_liger_kernel_to_llama if model_type == "llama" else apply_liger_kernel_to_mistral
    # model= patches this instance's forward only; rope, norm and SwiGLU would patch transformers'
    # modules for the whole process (and break compiled blocks with graph breaks), so they stay off
    patch(
        model=model,
        rope=False,
        rms_norm=False,
        swiglu=False,
        cross_entropy=False,
        fused_linear_cross_entropy=True,
    )
    return {"kind": "liger", "kernel": "liger_kernel fused_linear_cross_entropy"}


def _select_attention(module: nn.Module, spec: RunSpec, applied: Techniques) -> dict[str, Any]:
    if spec.attention == "fa2":
        _causal_lm(module).set_attn_implementation("flash_attention_2")
        return {"requested": "fa2", "implementation": "flash_attention_2"}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, SDPA_BACKENDS[spec.attention])
    # process-wide for the whole run, so it holds in backward (autograd's device threads), in the
    # recomputed forward of activation checkpointing, and while Dynamo compiles the blocks
    stack = contextlib.ExitStack()
    stack.enter_context(sdpa_kernel(backend))
    applied.undo.append(stack.close)
    out = {"requested": spec.attention, "implementation": "sdpa", "sdpa_backend": backend.name}
    if spec.compile:
        # inductor's caches key compiled graphs without the SDPA backend: a graph compiled under
        # another backend (in any process sharing the cache) would run instead (pytorch#185449)
        _set_flag(applied, torch._inductor.config, "fx_graph_cache", False)
        _set_flag(applied, torch._functorch.config, "enable_autograd_cache", False)
        out["inductor_cache"] = "off: its key ignores the SDPA backend (pytorch#185449)"
    return out


def _set_flag(applied: Techniques, config: Any, name: str, value: Any) -> None:
    before = getattr(config, name)
    setattr(config, name, value)
    applied.undo.append(lambda: setattr(config, name, before))
