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

from dataclasses import dataclass
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


@dataclass(frozen=True)
class LostTime:
    """Where the step time lost to scaling went, per step, at world size N against its baseline:
    the step linear scaling would give (`ideal_sec`), and the parts the profiled steps explain.
    Each part is a share of the profiled steps' device span applied to the window's step, and the
    baseline's own part is taken off (a 1-GPU run exposes no communication)."""

    step_sec: float
    ideal_sec: float
    exposed_comm_sec: float | None
    """Collectives no computation hid, less the part spent waiting for the slowest rank."""
    waiting_sec: float | None
    """Waiting inside collectives for the slowest rank: the most time any rank spent in collectives
    less the least (the slowest rank arrives last and waits least)."""
    host_sec: float | None
    """The device idle, waiting for its host (offload's CPU optimizer, PCIe copies, launches),
    beyond the baseline's."""

    @property
    def lost_sec(self) -> float:
        return self.step_sec - self.ideal_sec

    @property
    def other_sec(self) -> float:
        """What the profile does not explain (compute itself slower at N, the profiler's reach)."""
        known = [p for p in (self.exposed_comm_sec, self.waiting_sec, self.host_sec) if p is not None]
        return self.lost_sec - sum(known)

    def parts(self) -> dict[str, float | None]:
        return {
            "exposed communication": self.exposed_comm_sec,
            "waiting for the slowest rank": self.waiting_sec,
            "host work": self.host_sec,
            "other": self.other_sec,
        }

    @property
    def profiled(self) -> bool:
        return any(p is not None for p in (self.exposed_comm_sec, self.waiting_sec, self.host_sec))

    def main_cause(self) -> str | None:
        """The part that explains most of the loss, or None when nothing was lost or nothing splits it."""
        if self.lost_sec <= 0 or not self.profiled:
            return None
        return max(((k, v) for k, v in self.parts().items() if v is not None), key=lambda kv: kv[1])[0]


def _tokens_per_step(r: dict[str, Any]) -> float:
    return global_batch(r) * float(r.get("seq_len") or 1)


def _comm(r: dict[str, Any]) -> dict[str, Any]:
    return r.get("communication") or {}


def _share(r: dict[str, Any], key: str) -> float | None:
    """A time of the profiled steps as a share of their device span (communication block)."""
    comm = _comm(r)
    span, value = comm.get("profiled_step_sec"), comm.get(key)
    return value / span if span and value is not None else None


def _waiting_share(r: dict[str, Any]) -> float | None:
    """The spread of time in collectives over the ranks' profiled steps, as a share of the span."""
    span = _comm(r).get("profiled_step_sec")
    times = [
        (rank.get("profile") or {}).get("comm_sec_per_step")
        for rank in r.get("per_rank") or []
        if (rank.get("profile") or {}).get("comm_sec_per_step") is not None
    ]
    if not span or len(times) < 2:
        return None
    return (max(times) - min(times)) / span


def lost_time(run: dict[str, Any], baseline: dict[str, Any]) -> LostTime | None:
    """`run` (result.json) against `baseline` (the same configuration at a smaller world size)."""
    step, base = run.get("mean_step_time_sec"), baseline.get("mean_step_time_sec")
    n, n0 = int(run.get("world_size") or 1), int(baseline.get("world_size") or 1)
    if not step or not base:
        return None
    # the step linear scaling gives: the baseline's, for as many tokens per rank (eff = ideal / step)
    ideal = base * (_tokens_per_step(run) / _tokens_per_step(baseline)) * (n0 / n)
    exposed, wait = _share(run, "comm_exposed_sec_per_step"), _waiting_share(run)
    base_exposed = _share(baseline, "comm_exposed_sec_per_step") if n0 > 1 else 0.0
    exposed_sec = waiting_sec = None
    if exposed is not None and base_exposed is not None:
        waiting_sec = min(wait or 0.0, exposed) * step
        exposed_sec = exposed * step - waiting_sec - base_exposed * ideal
    idle, base_idle = _share(run, "device_idle_sec_per_step"), _share(baseline, "device_idle_sec_per_step")
    host_sec = idle * step - base_idle * ideal if idle is not None and base_idle is not None else None
    return LostTime(step, ideal, exposed_sec, waiting_sec, host_sec)
