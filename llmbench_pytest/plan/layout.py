"""A model's modules in the order its forward runs them, with their own parameters: what ZeRO-3
gathers module by module (analysis/zero3_memory.py). Imports torch and transformers; called by
plan/predict.py for DeepSpeed's ZeRO-3 only.

The model is built by the run's own builder (worker/models.build_model) under FakeTensorMode, as
the step trace builds it, and one forward of a batch of one short sequence runs with a pre-hook on
every module: no weight is allocated. It takes 1-2 s on a CPU core (llama-1b), so it is kept on
disk (model_layout). Parameter ids follow named_parameters (the order DeepSpeed numbers them in); a
tied weight keeps one id wherever it is used (GPT-2's LM head gathers the input embedding again).
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from ..analysis.zero3_memory import Call

if TYPE_CHECKING:
    from ..config.presets import ModelPreset
    from ..config.spec import RunSpec

LAYOUT_SEQ_LEN = 16
"""Tokens of the one sequence the layout's forward runs: the order of modules does not depend on it."""

_LAYOUTS: dict[tuple[Any, ...], tuple[Call, ...]] = {}
"""Layouts by what decides them, for this process (a rank predicts each configuration once)."""


def _key(spec: RunSpec, preset: ModelPreset) -> tuple[Any, ...]:
    """What decides the modules a forward runs: the model and what changes its modules (precision,
    adapters, fp8's layers, a fused loss that reads the head's weight without calling it), not the
    strategy, shapes or run settings: ZeRO-3 with and without offload share one layout."""
    lora = spec.lora_rank if spec.workload == "lora" else None
    techniques = (spec.fused_loss, spec.fp8, spec.attention, spec.device)
    return ("layout", preset.name, str(preset.path), json.dumps(preset.config, sort_keys=True, default=str),
            spec.model_config, spec.workload, spec.dtype, lora, techniques)  # fmt: skip


def model_layout(spec: RunSpec, preset: ModelPreset) -> tuple[Call, ...]:
    """Every module `spec`'s model runs in one forward, in that order, with its own parameters and
    the repeated block it belongs to. Kept for the process and, beside the step traces, on disk
    (worker/trace_cache.py: keyed with llmbench's code and the libraries' versions): recording it
    costs a model build and a forward under FakeTensorMode, 1-2 s on a CPU core, in every rank
    and every `llmbench plan` that predicts ZeRO-3."""
    from ..worker import trace_cache

    key = _key(spec, preset)
    if key not in _LAYOUTS:
        if len(_LAYOUTS) > 8:
            _LAYOUTS.clear()
        stored = trace_cache.load_json(key)
        try:
            calls = tuple(Call(p, c, tuple(map(tuple, own)), b) for p, c, own, b in stored or ())
        except (TypeError, ValueError):
            calls = ()
        if not calls:
            shape = spec.replace(per_device_batch=1, seq_len=LAYOUT_SEQ_LEN, grad_ckpt=False, world_size=1)
            calls = _record(shape, preset)
            trace_cache.store_json(
                key, [[c.path, c.cls, [list(u) for u in c.params], c.block] for c in calls]
            )
        _LAYOUTS[key] = calls
    return _LAYOUTS[key]


def _record(spec: RunSpec, preset: ModelPreset) -> tuple[Call, ...]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ..worker.models import build_model
    from ..worker.step_trace import _adapters_stay_put

    stay = _adapters_stay_put() if spec.workload == "lora" else contextlib.nullcontext()
    with FakeTensorMode(allow_non_fake_inputs=True), stay:
        built = build_model(spec, preset, torch.device("cpu"))
        module = built.module
        ids: dict[int, int] = {}
        for p in module.parameters():
            ids.setdefault(id(p), len(ids))
        names = {id(m): name for name, m in module.named_modules(remove_duplicate=False)}
        blocks = [m for m in module.modules() if built.block_classes and isinstance(m, built.block_classes)]
        block_of = {id(sub): names[id(b)] for b in blocks for sub in b.modules()}
        calls: list[Call] = []

        def before(m: torch.nn.Module, _args: Any) -> None:
            own = tuple((ids[id(p)], p.numel()) for p in m._parameters.values() if p is not None)
            cls = f"{type(m).__module__}.{type(m).__qualname__}"
            calls.append(Call(names.get(id(m), ""), cls, own, block_of.get(id(m))))

        handles = [m.register_forward_pre_hook(before) for m in module.modules()]
        width = 2 * LAYOUT_SEQ_LEN if spec.workload == "seq2seq" else LAYOUT_SEQ_LEN
        batch = torch.randint(0, max(2, built.vocab_size - 1), (1, width))
        try:
            with torch.no_grad():
                built.loss(module, batch)
        finally:
            for h in handles:
                h.remove()
    return tuple(calls)
