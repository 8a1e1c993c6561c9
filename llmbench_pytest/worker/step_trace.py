"""One training step traced without a GPU: what activations and temporaries it holds at its peak.

The model is built by the run's own builder (models.build_model: the same config, workload, LoRA
adapters, checkpointing and loss) under torch's FakeTensorMode, so no weight is allocated or
drawn, and one forward and backward runs under this module's own dispatch mode (`LiveBytes`), which
counts the bytes of every storage an operator creates until it is freed, the parameters and their
gradients apart, and records the peak. torch's memory tracker
(torch.distributed._tools.mem_tracker.MemTracker) is not used: it files tensors the same way but
scans every tracked tensor at every operator (75 s for a 7B LoRA step). A 1B model at batch 8 and
2048 tokens traces in about 3.5 s on one CPU core; nothing is allocated but Python objects.

What the trace holds at its peak beyond the parameters and gradients (activations and temporaries:
the fp32 logits of the loss, attention's saved statistics) is what analysis/peak_model.py adds to
the model states and buffers it predicts per strategy. The trace runs on the CPU (the CPU build of
torch has no fake CUDA device), with the compute precision the strategy uses on a GPU:

- "amp": fp32 weights under autocast (DDP), as the rank computes;
- "half": weights in the run's 16-bit precision (FSDP's param_dtype, DeepSpeed's bf16/fp16 module);
- "fp32": no mixed precision.

The trace needs torch's FakeTensorMode, TorchDispatchMode and
Tensor.register_post_accumulate_grad_hook (all in torch 2.1 on; llmbench requires torch 2.6). Where
FakeTensorMode cannot be imported TraceUnavailable is raised (plan/predict.py raises it for a
compiled run too): a rank records it, or any other error of the trace, in place of its prediction
and runs as it would have, and `llmbench plan` says why in one line. Nothing else is estimated in
its place.

plan/predict.py makes the trace follow two things a GPU rank computes differently from the module
the builder makes (LoRA adapters cast to 16 bits by FSDP and DeepSpeed, DeepSpeed's ZeRO-3 linear):
see its docstring. What tracing on a CPU does differently from a GPU rank by itself (causal masks
and attention dropout with fake tensors, CUDA autocast's float32 ops) is put right for every trace
by trace_as_gpu.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..analysis.peak_model import StepTrace
from . import trace_cache
from .device_init import HALF_DTYPES
from .trace_as_gpu import as_a_gpu_rank_computes
from .trace_cache import compute_mode, trace_key

__all__ = ["LiveBytes", "TraceUnavailable", "compute_mode", "trace_key", "trace_step"]

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..config.presets import ModelPreset
    from ..config.spec import RunSpec
    from .built import BuiltModel


class TraceUnavailable(Exception):
    """This torch cannot trace a step's memory (no FakeTensorMode), or the model cannot be traced."""


_TRACED: dict[tuple[Any, ...], StepTrace] = {}
"""Traces by what decides them: a warm rank traces each model, shape and precision once, and a
fresh process reads what an earlier one traced (trace_cache.py)."""


def trace_step(spec: RunSpec, preset: ModelPreset, wait_for_ahead: bool = True) -> StepTrace:
    """The peak of one forward and backward of `spec`'s model at its batch and sequence length.
    `wait_for_ahead`: where the session's trace ahead (worker/trace_ahead.py) is tracing this very
    step, wait for its result rather than trace it a second time (False: that process itself)."""
    key = trace_key(spec, preset)
    if key not in _TRACED:
        if len(_TRACED) > 16:
            _TRACED.clear()
        kept = trace_cache.load(key)
        if kept is None and wait_for_ahead:
            kept = trace_cache.wait_for_ahead(key)
        if kept is None:
            kept = _trace(spec, preset, key[-1])
            trace_cache.store(key, kept)
        else:
            kept = dataclasses.replace(kept, cached=True)
        _TRACED[key] = kept
    return _TRACED[key]


def _trace(spec: RunSpec, preset: ModelPreset, mode: str) -> StepTrace:
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError as exc:
        raise TraceUnavailable(
            f"torch {torch.__version__} cannot trace a step without memory ({exc})"
        ) from exc
    from .models import build_model

    started = time.perf_counter()
    cpu = torch.device("cpu")
    default = torch.get_default_dtype()
    # built in the precision it computes in (a fake module cannot be cast after it is built)
    torch.set_default_dtype(HALF_DTYPES[spec.dtype] if mode == "half" else torch.float32)
    try:
        # peft (and through it bitsandbytes and torch._dynamo, seconds of imports on a GPU host)
        # only where the model has adapters
        stay = _adapters_stay_put() if spec.workload == "lora" else contextlib.nullcontext()
        with FakeTensorMode(allow_non_fake_inputs=True), stay:
            return _traced(spec, mode, build_model(spec, preset, cpu), started)
    finally:
        torch.set_default_dtype(default)


@contextlib.contextmanager
def _adapters_stay_put() -> Iterator[None]:
    """peft moves each new adapter to its base layer's device and dtype with Module.to, which a
    fake parameter refuses (it swaps tensors, and the fake mode holds a weak reference to each).
    The adapters are already on the CPU, built in the default dtype the trace set; peft then
    upcasts them to fp32 (get_peft_model's autocast_adapter_dtype), as a DDP rank keeps them. Their
    own few MB change nothing the trace measures; the fp32 copies of their inputs that follow do,
    and where the GPU computes the adapters in 16 bits plan/predict.py builds them without the
    upcast."""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        yield
        return
    name = "_move_adapter_to_device_of_base_layer"
    original = getattr(BaseTunerLayer, name, None)
    if original is None:
        yield
        return
    to = torch.nn.Module.to

    def stay_on_the_cpu(module: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is None and (device is None or device.type == "cpu"):
            return module  # peft moves a new layer to its base weight's device: where it is
        return to(module, *args, **kwargs)

    setattr(BaseTunerLayer, name, lambda self, *a, **k: None)
    torch.nn.Module.to = stay_on_the_cpu  # type: ignore[method-assign]
    try:
        yield
    finally:
        setattr(BaseTunerLayer, name, original)
        torch.nn.Module.to = to  # type: ignore[method-assign]


def _traced(spec: RunSpec, mode: str, built: BuiltModel, started: float) -> StepTrace:
    module = built.module
    counts = _counts(module, built.block_classes)
    width = 2 * spec.seq_len if spec.workload == "seq2seq" else spec.seq_len
    amp = torch.autocast("cpu", dtype=HALF_DTYPES[spec.dtype]) if mode == "amp" else contextlib.nullcontext()
    params = list(module.parameters())
    live = LiveBytes(params)
    with as_a_gpu_rank_computes(spec, mode), live:
        # made inside the count: a rank holds its micro-batch's token ids on the device too
        batch = torch.randint(0, max(2, built.vocab_size - 1), (spec.per_device_batch, width))
        with amp:
            loss = built.loss(module, batch)
        after_forward = live.current
        loss.backward()
    return StepTrace(
        activation_bytes=after_forward,
        temporary_bytes=live.peak - after_forward,
        parameter_bytes=sum(p.numel() * p.element_size() for p in params),
        gradient_bytes=live.grads,
        compute=mode,
        seconds=time.perf_counter() - started,
        torch=torch.__version__,
        **counts,
    )


class LiveBytes(TorchDispatchMode):
    """Bytes of every storage an operator creates while it lives, parameters and gradients apart.

    Each new storage is counted when an operator returns it and uncounted when it is freed (a
    weakref finalizer: torch keeps one Python object per live storage). `peak` is the largest
    `current`; a parameter's gradient moves to `grads` once it is accumulated, so `current` holds
    activations and temporaries only. torch's MemTracker (torch.distributed._tools.mem_tracker)
    does the same and more, but scans every tracked tensor on every operator: 75 s for a 7B LoRA
    step against a few seconds here; it is not used."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        super().__init__()
        self.current = self.peak = self.grads = 0
        self._sizes: dict[int, int] = {}
        self._grad_keys: set[int] = set()
        for p in params:
            self._sizes[id(p.untyped_storage())] = 0  # parameters are the states' share, not ours
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad) for p in params if p.requires_grad]

    def __exit__(self, *exc: object) -> None:
        for h in self._hooks:
            h.remove()
        super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._count(t.untyped_storage())
        return out

    def _count(self, storage: Any) -> None:
        key = id(storage)
        if key in self._sizes:
            return
        n = int(storage.nbytes())
        self._sizes[key] = n
        self.current += n
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        n = self._sizes.pop(key, 0)
        if key in self._grad_keys:
            self._grad_keys.discard(key)
            self.grads -= n
        else:
            self.current -= n

    def _grad(self, param: torch.Tensor) -> None:
        key = id(param.grad.untyped_storage()) if param.grad is not None else None
        if key in self._sizes and key not in self._grad_keys:
            self._grad_keys.add(key)
            self.current -= self._sizes[key]
            self.grads += self._sizes[key]


def _counts(module: torch.nn.Module, block_classes: tuple[type, ...]) -> dict[str, int]:
    """Parameter counts the buffers of each strategy are sized by."""
    params = trainable = 0
    for p in module.parameters():
        params += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    blocks = [m for m in module.modules() if isinstance(m, block_classes)] if block_classes else []
    in_blocks = [sum(p.numel() for p in b.parameters()) for b in blocks]
    embeddings = [m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Embedding)]
    return {
        "params": params,
        "trainable": trainable,
        "largest_block": max(in_blocks, default=0),
        "outside_blocks": params - sum(in_blocks),
        "embedding": max(embeddings, default=0),
    }
