"""Which rank, if any, held the others back, and what it cost a step. Standard library only.

In a data-parallel step every rank waits for the slowest at the next collective, so the ranks'
step times are all the same and a slow rank does not show in them: it shows in its own work,
which is longer than the others' while their waiting is longer than its. Three measures of a
rank's own work, each compared between the ranks:

- optimizer: the host's time inside torch's optimizer step, step by step over the window
  (worker/timing.OptimizerHostClock), every run of two ranks or more. It holds no collective,
  so a rank held up there (a busy host, a slow CPU optimizer) is the one that measures long.
- compute: on a GPU, kernel time outside the collectives in the profiled steps; on a CPU with
  profiled steps (--llmbench-profile), the time outside gloo's collectives (a CPU computes there).
- host: on a GPU, the device idle in the profiled steps (it waited for its host); the others,
  waiting in a collective, run NCCL's kernel meanwhile and are busy. Named only where the window
  bears it out: that rank's GPU utilization over the window (NVML) lower than the others' by
  more than three times their spread (_borne_out); at two ranks, with no spread to hold it to,
  the window cannot, and the host measure names no one.

A rank is named when one measure of it exceeds the median of the others' by more than three
times their noise, and by more than the mean step is known to: its 95% interval, or the
precision the run aimed at (--llmbench-precision, 1%) where it did better. A cost of a step below
what the step itself is known to is no finding; on a CPU, whose ranks share cores with each other
and with other processes, that interval is wide, and only a rank far off the others is named.
The others' noise: for the optimizer, the largest robust standard deviation of their steps
(1.4826 MAD) or the spread of their medians, whichever is larger; for the profiled measures, one
step each, the spread of the others or the standard deviation of the window's steps times the
square root of two (the difference of two single steps; not the robust one: a single profiled
step may be the one a collection or a hiccup of the host fell in), whichever is larger. What it costs
a step is the largest excess named: the time the others wait for it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from .stats import MAD_TO_SIGMA, mean_interval

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

NOISE_TIMES = 3.0
"""A rank is named beyond this many of the others' noise (three standard deviations)."""
UTIL_FLOOR_POINTS = 1.0
"""The least spread of the others' GPU utilization (NVML's percent, sampled over the window)."""
MEASURES = {
    "optimizer": "host time inside the optimizer step",
    "compute": "compute",
    "host": "GPU idle waiting for its host",
}


@dataclass(frozen=True)
class Measure:
    """One measure of the ranks' own work, compared."""

    name: str
    what: str
    source: str
    per_rank_sec: dict[int, float]
    slowest_rank: int
    others_sec: float
    excess_sec: float
    noise_sec: float
    bound_sec: float
    named: bool
    note: str = ""
    """Why a measure beyond its bound names no rank (the window does not bear it out), else ''."""


def _robust_sd(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    median = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)


def _compare(
    name: str, what: str, source: str, per_rank: dict[int, float], noise_in: float, floor: float
) -> Measure:
    slowest = max(per_rank, key=lambda r: per_rank[r])
    others = [v for r, v in per_rank.items() if r != slowest]
    base = statistics.median(others)
    noise = max(noise_in, max(others) - min(others))
    bound = max(NOISE_TIMES * noise, floor)
    excess = per_rank[slowest] - base
    return Measure(name, what, source, per_rank, slowest, base, excess, noise, bound, excess > bound)


def _optimizer(ranks: Sequence[Mapping[str, Any]], floor: float) -> Measure | None:
    steps = {int(r["rank"]): list(r.get("optimizer_host_sec_steps") or []) for r in ranks}
    if len(steps) < 2 or any(len(v) < 2 for v in steps.values()):
        return None
    medians = {r: statistics.median(v) for r, v in steps.items()}
    slowest = max(medians, key=lambda r: medians[r])
    spread = max(_robust_sd(v) for r, v in steps.items() if r != slowest)
    count = min(len(v) for v in steps.values())
    source = f"the window's {count} steps, median per rank"
    return _compare("optimizer", MEASURES["optimizer"], source, medians, spread, floor)


def _profiled(ranks: Sequence[Mapping[str, Any]], device: str, step_sd: float, floor: float) -> list[Measure]:
    traces = {int(r["rank"]): r.get("trace") for r in ranks}
    if len(traces) < 2 or not all(traces.values()):
        return []
    profiled = next(iter(traces.values()))["steps"]  # type: ignore[index]
    source = f"torch.profiler over {profiled} untimed step(s) after the window, every rank"
    noise = math.sqrt(2) * step_sd
    values: dict[str, dict[int, float]] = {}
    if device == "cuda":
        values["compute"] = {r: t.get("compute_sec_per_step") for r, t in traces.items()}  # type: ignore[union-attr]
        values["host"] = {r: t.get("device_idle_sec_per_step") for r, t in traces.items()}  # type: ignore[union-attr]
        what = {"compute": "GPU kernels outside the collectives", "host": MEASURES["host"]}
    else:
        values["compute"] = {
            r: t["span_sec_per_step"] - t["comm_sec_per_step"]  # type: ignore[index]
            for r, t in traces.items()
        }
        what = {"compute": "time outside gloo's collectives"}
    measures = [
        _compare(name, what[name], source, per_rank, noise, floor)
        for name, per_rank in values.items()
        if all(v is not None for v in per_rank.values())
    ]
    return [_borne_out(m, ranks) if m.name == "host" and m.named else m for m in measures]


def _borne_out(m: Measure, ranks: Sequence[Mapping[str, Any]]) -> Measure:
    """A GPU idle for its host in the one profiled step, held against the whole window: a rank
    whose host holds the others back keeps its GPU idle while theirs run NCCL's kernels, so its
    GPU utilization over the window (NVML) is lower than theirs. Without that, the profiled step
    alone names no one: a ZeRO-3 step's Python work puts one rank's host behind in any single
    step, a different rank each time (healthy llama-7b zero3 and zero2 at 4 GPUs, 4x H200,
    2026-11-28: 0.18-0.79 s idle on one rank in the profiled step, its utilization over the window
    not the lowest, or within the others' spread)."""
    util = {int(r["rank"]): (r.get("gpu_monitor") or {}).get("util_pct_mean") for r in ranks}
    if any(v is None for v in util.values()):
        return replace(m, named=False, note="no GPU utilization over the window to bear it out")
    others = [v for r, v in util.items() if r != m.slowest_rank]
    if len(others) < 2:
        # healthy ZeRO-3 pairs differ by 3 to 33 points (4x H200, 2026-11-28): one other rank
        # cannot say how far a healthy pair's utilization differs
        note = "two ranks: the window cannot tell a slow host from a healthy pair"
        return replace(m, named=False, note=note)
    base = statistics.median(others)
    spread = max(max(others) - min(others), UTIL_FLOOR_POINTS)
    below = base - util[m.slowest_rank]
    if below > NOISE_TIMES * spread:
        mine = util[m.slowest_rank]
        return replace(m, note=f"borne out: GPU utilization {mine:.0f}% over the window against {base:.0f}%")
    return replace(
        m,
        named=False,
        note=(
            f"one profiled step, not borne out by the window: rank {m.slowest_rank}'s GPU utilization "
            f"{util[m.slowest_rank]:.0f}% against the others' {base:.0f}% (spread {spread:.0f} points)"
        ),
    )


def find(
    ranks: Sequence[Mapping[str, Any]], step_times: Sequence[float], device: str, precision: float = 0.01
) -> dict[str, Any] | None:
    """The straggler finding of one run (module docstring), or None with fewer than two ranks or
    no measured steps. `ranks`: the per-rank records; `step_times`: the window's steps;
    `precision`: the relative half-width the run aimed to know its mean step to."""
    if len(ranks) < 2 or len(step_times) < 2:
        return None
    interval = mean_interval(list(step_times))
    mean_step = statistics.fmean(step_times)
    reached = interval.half_width if interval and math.isfinite(interval.half_width) else math.inf
    floor = max(precision * mean_step, reached)
    found = [_optimizer(ranks, floor), *_profiled(ranks, device, statistics.stdev(step_times), floor)]
    measures = [m for m in found if m is not None]
    if not measures:
        return None
    named = [m for m in measures if m.named]
    worst = max(named, key=lambda m: m.excess_sec) if named else None
    return {
        "rank": worst.slowest_rank if worst else None,
        "cost_sec_per_step": worst.excess_sec if worst else None,
        "cost_fraction_of_step": worst.excess_sec / mean_step if worst and mean_step > 0 else None,
        "measure": worst.name if worst else None,
        "message": message(worst, mean_step) if worst else None,
        "mean_step_sec": mean_step,
        "measures": [_as_dict(m) for m in measures],
        "rule": (
            f"a rank is named when one measure of its own work exceeds the others' median by more than "
            f"{NOISE_TIMES:g} times their noise and by more than the mean step is known to (its 95% "
            "interval, at least the precision the run aimed at)"
        ),
    }


def _as_dict(m: Measure) -> dict[str, Any]:
    out = asdict(m)
    out["per_rank_sec"] = [m.per_rank_sec[r] for r in sorted(m.per_rank_sec)]
    return out


def message(m: Measure, mean_step: float) -> str:
    """One line naming the rank, the measure, the figures and what it costs a step."""
    return (
        f"rank {m.slowest_rank} held the others back: its {m.what} took "
        f"{m.per_rank_sec[m.slowest_rank]:.4f} s a step against {m.others_sec:.4f} s on the others "
        f"(+{m.excess_sec:.4f} s; the bound {m.bound_sec:.4f} s is {NOISE_TIMES:g} x their noise of "
        f"{m.noise_sec:.4f} s or what the mean step is known to, the larger): about {m.excess_sec:.3f} s of "
        f"each {mean_step:.3f} s step ({m.excess_sec / mean_step:.0%})"
    )
