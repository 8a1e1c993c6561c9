"""Scaling efficiency: how much of N times the baseline's throughput N ranks deliver.

Standard library only; the report's scaling table (report/scaling.py) and the `scaling` check
(checks/scaling.py) both take it from here.

    efficiency = T(N) / ((N / N0) * T(N0))

T is tokens/s over the whole job; N0 the baseline's world size (1 when a one-rank run was
measured, else the smallest). Weak scaling keeps the per-device batch (batch x grad
accumulation) and grows the global batch with N, llmbench's default; strong scaling keeps the
global batch, so each rank gets less work. Either way the ideal is N / N0 times the throughput.
"""

from __future__ import annotations

from typing import Any


def efficiency(
    tokens_per_sec: float, world_size: int, base_tokens_per_sec: float, base_world_size: int
) -> float:
    """T(N) / ((N / N0) T(N0)): 1.0 is linear scaling."""
    return tokens_per_sec / ((world_size / base_world_size) * base_tokens_per_sec)


def mode(run: dict[str, Any], baseline: dict[str, Any]) -> str | None:
    """'weak' when the per-device batch is the baseline's, 'strong' when the global batch is."""

    def per_device(r: dict[str, Any]) -> tuple[Any, Any]:
        return r.get("per_device_batch"), r.get("grad_accum")

    if per_device(run) == per_device(baseline):
        return "weak"
    if global_batch(run) == global_batch(baseline):
        return "strong"
    return None


def global_batch(r: dict[str, Any]) -> int:
    return int(r.get("world_size") or 1) * int(r.get("per_device_batch") or 0) * int(r.get("grad_accum") or 1)
