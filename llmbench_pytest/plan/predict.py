"""A RunSpec's predicted peak per rank: its step traced (worker/step_trace.py), its strategy's
states and buffers added (analysis/peak_model.py). Imports torch and transformers: called by a
rank before it builds its model, by `llmbench plan` and by tools/peak_table.py, never at
pytest's start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis import memory_model, peak_model
from ..config.presets import resolve_model

if TYPE_CHECKING:
    from ..config.presets import ModelPreset
    from ..config.spec import RunSpec


def inflight(spec: RunSpec, hidden_size: int, embedding: int) -> memory_model.InFlight:
    """DeepSpeed's buckets as worker/strategies/deepspeed_zero.build_config sizes them."""
    if spec.info.family != "deepspeed":
        return memory_model.InFlight(embedding=embedding)
    import torch

    from ..worker.strategies.deepspeed_zero import build_config

    zero = build_config(spec, hidden_size, torch.device(spec.device))["zero_optimization"]
    return memory_model.InFlight(
        embedding=embedding,
        bucket=int(zero.get("reduce_bucket_size") or 0),
        overlap_comm=bool(zero.get("overlap_comm")),
    )


def predict_spec(spec: RunSpec, preset: ModelPreset | None = None) -> peak_model.PeakPrediction:
    """Raises worker.step_trace.TraceUnavailable where this torch cannot trace the step."""
    from ..worker.step_trace import TraceUnavailable, trace_step

    if spec.compile:
        raise TraceUnavailable("torch.compile saves other tensors than the traced eager step: not predicted")
    preset = preset or resolve_model(spec.model, spec.model_config)
    trace = trace_step(spec, preset)
    hidden = int(
        preset.config.get("hidden_size") or preset.config.get("d_model") or preset.config.get("n_embd") or 0
    )
    return peak_model.predict(
        spec.strategy, spec.offload, spec.world_size, spec.dtype, trace,
        optimizer=spec.optimizer, inflight=inflight(spec, hidden, trace.embedding),
        lora=spec.workload == "lora",
    )  # fmt: skip
