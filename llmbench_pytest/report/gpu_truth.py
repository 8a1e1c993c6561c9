"""Reading a result's GPU measurements for the report, and what they mean.

Standard library only. The fields: the model-state census against the ZeRO-paper prediction, the
profiler's time in collectives and host-to-device bytes, the link probe, and the NVML monitor.
Each reader takes a result document (or a Config, averaging its finished runs) and returns None
where a field was not recorded, so CPU results and files written before these fields existed
read as "not measured" everywhere.

What a throttle reason means is decided here, once, for the markdown, the console and the CSV:
the software power cap is how a GPU at its power limit holds its budget (normal under dense
training); thermal and hardware slowdowns mean heat, power delivery or a fault held it back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .configs import Config

# worker/monitor.py's THROTTLING, copied: that module imports torch, the report must not
THROTTLING = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
REASON_WORDS = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sw_thermal_slowdown": "thermal slowdown (driver)",
    "hw_thermal_slowdown": "thermal slowdown (hardware)",
    "hw_power_brake_slowdown": "power brake (hardware)",
}
BENIGN = frozenset({"sw_power_cap"})
POWER_CAP_VERDICT = "normal for dense training at the power limit"
ATTENTION_VERDICT = "deserves attention: heat or the hardware, not the workload, held the GPU back"
ATTENTION_ADVICE = "check cooling and power (nvidia-smi -q -d PERFORMANCE) and rerun before trusting them"


@dataclass(frozen=True)
class Throttle:
    """One clock-event reason that slowed a run's GPUs, and how often."""

    reason: str
    """NVML's name (sw_power_cap, hw_thermal_slowdown, ...)."""
    fractions: tuple[float, ...]
    """Share of monitor samples with the reason, one per rank that sampled; empty when the result
    names the reason without per-rank monitors."""

    @property
    def words(self) -> str:
        return REASON_WORDS.get(self.reason, self.reason.replace("_", " "))

    @property
    def needs_attention(self) -> bool:
        return self.reason not in BENIGN

    @property
    def worst(self) -> float | None:
        return max(self.fractions) if self.fractions else None

    def share(self) -> str:
        """'in 100% of samples', or the range over ranks where they differ."""
        if not self.fractions:
            return "(share of samples not recorded)"
        lo, hi = round(min(self.fractions) * 100), round(max(self.fractions) * 100)
        if lo == hi:
            return f"in {hi}% of samples"
        return f"in {lo}-{hi}% of samples (range over {len(self.fractions)} ranks)"


def communication(d: Mapping[str, Any]) -> Mapping[str, Any]:
    comm = d.get("communication")
    return comm if isinstance(comm, Mapping) else {}


def monitors(d: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The NVML summaries of the ranks that had one."""
    ranks = d.get("per_rank") or []
    return [
        r["gpu_monitor"]
        for r in ranks
        if isinstance(r, Mapping) and isinstance(r.get("gpu_monitor"), Mapping)
    ]


def throttles(d: Mapping[str, Any]) -> list[Throttle]:
    """The reasons a run's GPUs slowed themselves down; those that need attention first."""
    mons = monitors(d)
    reasons = [m.get("clock_event_reasons") or {} for m in mons]
    names = {n for r in reasons for n in r if n in THROTTLING}
    out = [Throttle(n, tuple(float(r.get(n) or 0.0) for r in reasons)) for n in names]
    if not out and d.get("throttled"):
        # a result that says it throttled but carries no per-rank monitor: name what it lists
        out = [Throttle(str(n), ()) for n in d.get("throttle_reasons") or []]
    return sorted(out, key=lambda t: (not t.needs_attention, -(t.worst or 0.0), t.reason))


def throttle_text(d: Mapping[str, Any]) -> str | None:
    """'power cap in 100% of samples: normal for ...', or None when the run did not throttle."""
    ts = throttles(d)
    if not ts:
        return None
    parts = [f"**{t.words} {t.share()}**" if t.needs_attention else f"{t.words} {t.share()}" for t in ts]
    verdict = ATTENTION_VERDICT if needs_attention(ts) else POWER_CAP_VERDICT
    return f"{', '.join(parts)}: {verdict}"


def needs_attention(ts: Iterable[Throttle]) -> bool:
    return any(t.needs_attention for t in ts)


def clock_limits(ts: Iterable[Throttle]) -> str:
    """A table cell: 'power cap 100%', the worst rank's share of samples per reason."""
    cells = []
    for t in ts:
        cell = t.words if t.worst is None else f"{t.words} {round(t.worst * 100)}%"
        cells.append(f"**{cell}**" if t.needs_attention else cell)
    return ", ".join(cells)


def clock_event_fractions(d: Mapping[str, Any]) -> str:
    """Every clock-event reason with the worst rank's share of samples: 'sw_power_cap=1.000' (CSV)."""
    worst: dict[str, float] = {}
    for m in monitors(d):
        for name, frac in (m.get("clock_event_reasons") or {}).items():
            worst[name] = max(worst.get(name, 0.0), float(frac))
    return ";".join(f"{n}={f:.3f}" for n, f in sorted(worst.items()))


def monitor_extreme(d: Mapping[str, Any], key: str, pick: Callable[[Iterable[float]], float]) -> float | None:
    """max or min of one per-rank monitor figure (power_w_max, sm_clock_mhz_min, ...) over ranks."""
    values = [m[key] for m in monitors(d) if m.get(key) is not None]
    return pick(values) if values else None


def config_comm(c: Config, key: str) -> float | None:
    return c.mean_by(lambda d: communication(d).get(key))


def config_extreme(c: Config, key: str, pick: Callable[[Iterable[float]], float]) -> float | None:
    values = [v for r in c.ok_runs if (v := monitor_extreme(r.data, key, pick)) is not None]
    return pick(values) if values else None


def config_throttles(c: Config) -> list[Throttle]:
    """The reasons over a configuration's runs, each with every run's ranks' shares."""
    merged: dict[str, list[float]] = {}
    for r in c.ok_runs:
        for t in throttles(r.data):
            merged.setdefault(t.reason, []).extend(t.fractions)
    out = [Throttle(n, tuple(f)) for n, f in merged.items()]
    return sorted(out, key=lambda t: (not t.needs_attention, -(t.worst or 0.0), t.reason))


def has_monitor(c: Config) -> bool:
    return any(r.data.get("gpu_util_pct") is not None or monitors(r.data) for r in c.ok_runs)


def is_offload(d: Mapping[str, Any]) -> bool:
    return str(d.get("offload") or "none") != "none"
