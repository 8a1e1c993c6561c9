"""Seed 000: VRAM under the tier's limit; and each strategy holds the model states its name says.

- `peak_memory`: peak device memory (reserved, on a GPU; the process's peak RSS on a CPU, where
  host memory is the device) at most the limit: --llmbench-vram-limit-gb, else the run's tier's
  (fixtures/tiers.toml: A 24 GB, B 80 GB). On a CPU the RSS includes the process's libraries
  (about 0.6 GB with torch and DeepSpeed), so a tier's limit holds it to what the tier's
  machine class can host.
- `model_states`: the census of live tensors at the end of backward (worker/memory.py) within
  MODEL_STATE_TOLERANCE of the prediction (analysis/memory_model.py: the ZeRO paper, with FSDP
  and DeepSpeed's specifics). It needs no other run. At world size 2 ZeRO-1 holds 2p + 6 bytes
  per parameter and ZeRO-2 p + (p + 12)/2: 10 against 9 in bf16, 14 against 12 in fp32, further
  apart than twice the tolerance, so a ZeRO-2 that keeps full gradients fails it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analysis import memory_model
from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping

MODEL_STATE_TOLERANCE = 0.05
"""Measured model states may differ from the prediction by 5% either way (the issue's bound).
Measured against it: every strategy at world sizes 1 and 2 on CPU within 1% (llama-tiny,
encdec-3m, mistral-tiny LoRA; fp32 and bf16), and on GPUs ddp, fsdp, zero2, zero3 within 0.2%
(2x H200, llama-1b, census after backward)."""


def check_memory(result: Mapping[str, Any], limit_gb: float | None, source: str = "") -> CheckOutcome:
    """Peak memory under the limit: device reserved memory on GPU, resident set on CPU.
    `source` names where the limit came from (a tier, the option)."""
    name = "peak_memory"
    on_gpu = result.get("device") == "cuda"
    peak = result.get("peak_reserved_gb") if on_gpu else result.get("peak_host_rss_gb")
    what = "peak reserved GPU memory" if on_gpu else "peak host memory (RSS)"
    if peak is None:
        return CheckOutcome(name, None, f"{what} was not measured")
    if limit_gb is None:
        per_rank = [r.get("device_total_gb") for r in result.get("per_rank", []) if r.get("device_total_gb")]
        limit_gb = min(per_rank) if per_rank else None
        source = "the device's memory"
    if limit_gb is None:
        return CheckOutcome(
            name, None, f"{what} {peak:.3f} GB; no limit set (--llmbench-vram-limit-gb)", peak
        )
    of = f" ({source})" if source else ""
    if peak <= limit_gb:
        return CheckOutcome(
            name, True, f"{what} {peak:.3f} GB <= limit {limit_gb:.3f} GB{of}", peak, limit_gb
        )
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: {what} {peak:.3f} GB exceeds the limit of {limit_gb:.3f} GB{of}. "
        "Shard more (zero2, zero3, fsdp), lower --llmbench-batch, turn on --llmbench-grad-ckpt, "
        "or raise --llmbench-vram-limit-gb.",
        peak,
        limit_gb,
    )


def _no_prediction(result: Mapping[str, Any]) -> str:
    strategy, offload = str(result.get("strategy")), result.get("offload")
    if offload not in (None, "none"):
        return (
            "offload moves states between host and device within the step, through transfer buffers "
            "the size of the largest parameter: the device share is reported, not checked"
        )
    zero = ((result.get("strategy_config") or {}).get("deepspeed_config") or {}).get(
        "zero_optimization"
    ) or {}
    if strategy == "zero1" and zero.get("overlap_comm"):
        return (
            "DeepSpeed's ZeRO-1 with overlap_comm reduces gradients while backward runs and keeps those "
            "larger than a bucket whole until after it, so what it holds then depends on where its bucket "
            "and partition boundaries fall: no prediction (after backward it holds what ZeRO-2 holds)"
        )
    if result.get("optimizer") not in (None, "adamw_torch"):
        return f"no prediction for {strategy} around {result.get('optimizer')}"
    return f"memory_model.py has no prediction for {strategy}"


def _siblings(result: Mapping[str, Any], measured: float) -> str:
    """Which other strategy's prediction the measurement matches, if any: 'what zero1 holds'."""
    flight = memory_model.InFlight.of(result.get("model_info") or {}, result.get("strategy_config") or {})
    for other in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
        if other == result.get("strategy"):
            continue
        pred = memory_model.predicted_gb(
            other,
            "none",
            int(result.get("world_size") or 1),
            str(result.get("dtype")),
            result.get("params"),
            result.get("trainable_params"),
            optimizer=str(result.get("optimizer") or "adamw_torch"),
            inflight=flight,
            device=str(result.get("device") or "cuda"),
        )
        if pred and abs(measured / pred - 1) <= MODEL_STATE_TOLERANCE:
            return f"; that is what {other} holds ({pred:.4f} GB predicted)"
    return ""


def check_model_states(result: Mapping[str, Any]) -> CheckOutcome:
    """Measured model states per rank within MODEL_STATE_TOLERANCE of the strategy's prediction."""
    name = "model_states"
    measured, predicted = result.get("model_state_gb"), result.get("model_state_predicted_gb")
    if measured is None:
        return CheckOutcome(name, None, "model states were not measured (no census)")
    if not predicted:
        return CheckOutcome(name, None, f"{measured:.4f} GB measured; {_no_prediction(result)}")
    gap = measured / predicted - 1
    ws = result.get("world_size")
    detail = (
        f"model states per rank at world size {ws}: {measured:.4f} GB measured (census at the end of "
        f"backward), {predicted:.4f} GB predicted, {gap:+.1%}"
    )
    if abs(gap) <= MODEL_STATE_TOLERANCE:
        return CheckOutcome(
            name, True, f"{detail}, within {MODEL_STATE_TOLERANCE:.0%}", gap, MODEL_STATE_TOLERANCE
        )
    what = (
        "It holds more than its sharding allows: it is not partitioning what its name says"
        if gap > 0
        else "It holds less than predicted: the census missed tensors, or the states live elsewhere"
    )
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: {detail}, beyond {MODEL_STATE_TOLERANCE:.0%}"
        f"{_siblings(result, measured)}. {what}: check its configuration in result.json (strategy_config).",
        gap,
        MODEL_STATE_TOLERANCE,
    )
