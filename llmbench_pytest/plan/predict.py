"""A RunSpec's predicted peak per rank: its step traced (worker/step_trace.py), its strategy's
states and buffers added (analysis/peak_model.py). Imports torch and transformers: called by a
rank before it builds its model, by `llmbench plan` and by tools/peak_table.py, never at
pytest's start-up.

Two things a rank computes differently from the module models.build_model builds, which the trace
is made to follow (`gpu_compute`, while the step is traced and never after):

- LoRA adapters in 16 bits where the strategy computes in 16 bits. peft upcasts the adapters to
  fp32 (get_peft_model's autocast_adapter_dtype), and the adapted layer then casts its input to
  fp32 before the adapter: an fp32 copy of each adapted layer's input saved for backward. On the
  GPU FSDP's param_dtype and DeepSpeed's bf16/fp16 module cast the adapters to 16 bits, and no
  such copy exists: on mistral-7b (batch 4 x 1024, 4 adapted projections a layer) the trace held
  8.6 GB of them, the whole of the 20% the fsdp and zero2 LoRA runs measured below the prediction
  (docs/results/2026-11-25-peak-prediction). Under DDP's autocast the adapters stay fp32 on the
  GPU too, as traced.
- DeepSpeed's linear under ZeRO-3, which replaces torch.nn.functional.linear for the process while
  its engine runs (deepspeed/runtime/zero/linear.py: LinearFunctionForZeroStage3 saves its input and
  weight for backward whether the weight is trained or not). For a fully trained model that saves
  what torch's linear saves; for a frozen base (LoRA) it saves the input of every frozen layer too
  (mistral-7b LoRA: 26.6 GB of activations against 21.8 with torch's linear).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from typing import TYPE_CHECKING, Any

from ..analysis import memory_model, peak_model, zero3_memory
from ..config.presets import resolve_model

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ..analysis.peak_model import StepTrace
    from ..config.presets import ModelPreset
    from ..config.spec import RunSpec

ADAPTERS_16BIT = "LoRA adapters in 16 bits"
DEEPSPEED_LINEAR = "DeepSpeed's ZeRO-3 linear"


def deepspeed_config(spec: RunSpec, hidden_size: int) -> dict[str, Any] | None:
    """The DeepSpeed config the run's strategy builds (worker/strategies/deepspeed_zero.build_config,
    a user's own config merged in where the run names one); None for the other strategies."""
    if spec.info.family != "deepspeed":
        return None
    import torch

    from ..worker.strategies.deepspeed_zero import build_config

    return build_config(spec, hidden_size, torch.device(spec.device))


def inflight(
    spec: RunSpec, hidden_size: int, embedding: int, config: Mapping[str, Any] | None = None
) -> memory_model.InFlight:
    """DeepSpeed's buckets as `config` (default: the one the run builds) sizes them."""
    if spec.info.family != "deepspeed":
        return memory_model.InFlight(embedding=embedding)
    zero = (config or deepspeed_config(spec, hidden_size) or {}).get("zero_optimization") or {}
    stage = zero.get("stage", spec.info.zero_stage)
    return memory_model.InFlight(
        embedding=embedding,
        bucket=int(zero.get("reduce_bucket_size") or zero3_memory.DEFAULTS["reduce_bucket_size"]),
        overlap_comm=bool(zero.get("overlap_comm", stage == 3)),  # DeepSpeed's default: on for ZeRO-3
    )


def zero3_held(
    spec: RunSpec, preset: ModelPreset, config: Mapping[str, Any] | None, trained: int
) -> zero3_memory.Zero3Held | None:
    """What ZeRO-3 holds beside its states by `config`'s settings and the model's layout
    (analysis/zero3_memory.py); None for the other strategies."""
    zero = (config or {}).get("zero_optimization") or {}
    if spec.info.family != "deepspeed" or zero.get("stage", spec.info.zero_stage) != 3:
        return None
    from .layout import model_layout

    settings = zero3_memory.Zero3Settings.of(zero)
    calls = model_layout(spec, preset)
    order, forward_units = zero3_memory.fetch_order(calls, settings, spec.grad_ckpt)
    params = sorted({pid: n for call in calls for pid, n in call.params}.items())
    persist = zero3_memory.persistent(params, settings)
    n = spec.world_size
    parts = [trained // n] if spec.workload == "lora" else [-(-numel // n) for _, numel in params]
    accum = str((config or {}).get("data_types", {}).get("grad_accum_dtype") or "").lower()
    grad_bytes = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}.get(
        accum, 2 if spec.dtype in ("bf16", "fp16") else 4
    )
    return zero3_memory.Zero3Held(
        gathered=zero3_memory.gathered_at_end_of_forward(order, forward_units, persist, settings),
        reduce_bucket=settings.reduce_bucket if settings.contiguous_gradients else 0,
        sub_group=zero3_memory.largest_sub_group(parts, settings.sub_group_size),
        grad_bytes=grad_bytes,
    )


def gpu_compute(spec: RunSpec, deepspeed_linear: bool | None = None) -> tuple[str, ...]:
    """What the trace is made to follow of how the rank computes (module docstring).
    `deepspeed_linear`: None, where the strategy runs it (DeepSpeed's ZeRO-3); True or False to ask
    (a run measured with the linear an earlier ZeRO-3 left in the process: plan/validate.py)."""
    from ..worker.trace_cache import compute_mode

    out = []
    if spec.workload == "lora" and compute_mode(spec.strategy, spec.dtype) == "half":
        out.append(ADAPTERS_16BIT)
    if deepspeed_linear is None:
        # where every weight trains outside autocast (ZeRO-3's own runs in 16 bits or fp32, LoRA
        # aside) it saves what torch's linear saves (tests/test_plan_validation.py): the trace of
        # torch's linear serves, shared with the other strategies (two traces fewer for
        # `llmbench plan`, one fewer for each ZeRO-3 configuration a rank predicts)
        zero3 = spec.info.family == "deepspeed" and spec.info.zero_stage == 3
        amp = compute_mode(spec.strategy, spec.dtype) == "amp"
        deepspeed_linear = zero3 and (spec.workload == "lora" or amp)
    if deepspeed_linear:
        out.append(DEEPSPEED_LINEAR)
    return tuple(out)


@contextlib.contextmanager
def _computing(what: tuple[str, ...]) -> Iterator[None]:
    """While the step is traced: `gpu_compute`'s changes, put back after, whatever happens (a
    rank traces before it builds its model: nothing of this may outlive the trace)."""
    from torch.nn import functional

    linear = functional.linear
    peft: Any = None
    if ADAPTERS_16BIT in what:
        import peft

        get_peft_model = peft.get_peft_model

        def adapters_as_built(*args: Any, **kwargs: Any) -> Any:
            kwargs["autocast_adapter_dtype"] = False  # left in the precision the trace builds in
            return get_peft_model(*args, **kwargs)

        peft.get_peft_model = adapters_as_built  # models.build_lora imports it when it is called
    if DEEPSPEED_LINEAR in what:
        functional.linear = _linear_saving_input_and_weight()
    try:
        yield
    finally:
        functional.linear = linear
        if peft is not None:
            peft.get_peft_model = get_peft_model


@functools.cache
def _linear_saving_input_and_weight() -> Any:
    """DeepSpeed's zero3_linear_wrap as far as memory goes: LinearFunctionForZeroStage3 saves the
    input, weight and bias for backward, whichever of them needs a gradient (torch's linear saves
    the input only where the weight is trained). Defined here: `llmbench plan` needs no DeepSpeed."""
    import torch

    class SavesInputAndWeight(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
        ) -> torch.Tensor:
            ctx.save_for_backward(x, weight, bias)
            if x.dim() == 2 and bias is not None:
                return torch.addmm(bias, x, weight.t())
            out = x.matmul(weight.t())
            if bias is not None:
                out += bias  # in place, as DeepSpeed's: under autocast the output stays in 16 bits
            return out

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
            x, weight, bias = ctx.saved_tensors
            flat = grad.reshape(-1, grad.shape[-1])
            grad_x = grad.matmul(weight) if ctx.needs_input_grad[0] else None
            grad_w = flat.t().matmul(x.reshape(-1, x.shape[-1])) if ctx.needs_input_grad[1] else None
            grad_b = flat.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
            return grad_x, grad_w, grad_b

    def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return SavesInputAndWeight.apply(x, weight, bias)

    return linear


def traced_as(spec: RunSpec, preset: ModelPreset, deepspeed_linear: bool | None = None) -> ModelPreset:
    """The preset the step is traced as: the trace's caches key on its name among the rest, and
    the name says what of the rank's computing was followed (`gpu_compute`)."""
    return _named(preset, gpu_compute(spec, deepspeed_linear))


def _named(preset: ModelPreset, what: tuple[str, ...]) -> ModelPreset:
    return dataclasses.replace(preset, name=f"{preset.name} ({', '.join(what)})") if what else preset


def step_trace_for(
    spec: RunSpec, preset: ModelPreset, deepspeed_linear: bool | None = None, wait_for_ahead: bool = True
) -> StepTrace:
    """`spec`'s step traced (or read from the caches) as its rank computes it."""
    from ..worker.step_trace import trace_step

    what = gpu_compute(spec, deepspeed_linear)
    with _computing(what):
        return trace_step(spec, _named(preset, what), wait_for_ahead)


def predict_spec(
    spec: RunSpec,
    preset: ModelPreset | None = None,
    capability_major: int | None = None,
    *,
    deepspeed_linear: bool | None = None,
    ds_config: Mapping[str, Any] | None = None,
) -> peak_model.PeakPrediction:
    """Raises worker.step_trace.TraceUnavailable where this torch cannot trace the step.
    `capability_major`: the GPU's (None: unknown, as for `llmbench plan`), for cuBLAS's workspaces;
    `deepspeed_linear`: see `gpu_compute`; `ds_config`: the DeepSpeed config a run recorded
    (strategy_config.deepspeed_config), in place of the one its strategy would build today."""
    from ..worker.step_trace import TraceUnavailable

    if spec.compile:
        raise TraceUnavailable("torch.compile saves other tensors than the traced eager step: not predicted")
    preset = preset or resolve_model(spec.model, spec.model_config)
    trace = step_trace_for(spec, preset, deepspeed_linear)
    hidden = int(
        preset.config.get("hidden_size") or preset.config.get("d_model") or preset.config.get("n_embd") or 0
    )
    config = ds_config or deepspeed_config(spec, hidden)
    lora = spec.workload == "lora"
    return peak_model.predict(
        spec.strategy, spec.offload, spec.world_size, spec.dtype, trace,
        optimizer=spec.optimizer, inflight=inflight(spec, hidden, trace.embedding, config),
        lora=lora, zero3=zero3_held(spec, preset, config, trace.trainable if lora else trace.params),
        workspace_bytes=peak_model.cublas_workspace_bytes(
            spec.device, capability_major, os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        ),
    )  # fmt: skip
