"""Seed 000: peak memory stays under the tier's limit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping


def check_memory(result: Mapping[str, Any], limit_gb: float | None) -> CheckOutcome:
    """Peak memory under the limit: device reserved memory on GPU, resident set on CPU."""
    name = "peak_memory"
    on_gpu = result.get("device") == "cuda"
    peak = result.get("peak_reserved_gb") if on_gpu else result.get("peak_host_rss_gb")
    what = "peak reserved GPU memory" if on_gpu else "peak host memory (RSS)"
    if peak is None:
        return CheckOutcome(name, None, f"{what} was not measured")
    if limit_gb is None:
        per_rank = [r.get("device_total_gb") for r in result.get("per_rank", []) if r.get("device_total_gb")]
        limit_gb = min(per_rank) if per_rank else None
    if limit_gb is None:
        return CheckOutcome(
            name, None, f"{what} {peak:.3f} GB; no limit set (--llmbench-vram-limit-gb)", peak
        )
    if peak <= limit_gb:
        return CheckOutcome(name, True, f"{what} {peak:.3f} GB <= limit {limit_gb:.3f} GB", peak, limit_gb)
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: {what} {peak:.3f} GB exceeds the limit of {limit_gb:.3f} GB. "
        "Shard more (zero2, zero3, fsdp), lower --llmbench-batch, turn on --llmbench-grad-ckpt, "
        "or raise --llmbench-vram-limit-gb.",
        peak,
        limit_gb,
    )
