"""The benchmark card: "scaling efficiency makes sense". A run at world size N against the same
configuration at the smallest world size N0 measured in the session:

    efficiency = T(N) / ((N / N0) T(N0))        (analysis/scaling.py; T = tokens/s)

at least --llmbench-min-scaling. The default, 60%, is the benchmark card's own line: it puts 2 GPUs
at 50% as its baseline and calls "<30% at 4 GPUs" a reason to investigate, which against its 2-GPU
baseline is 30/50 = 60% of linear. It is also where the report names "poor scaling"
(report/summary/recommend.py). Measured on 2x H200 (llama-1b, weak scaling against one GPU): ddp 96%, fsdp
97%, fsdp_grad_op 98%, zero0 98%, zero1 102%, zero2 104%, zero3 95%, all far above it; zero2_offload
40% and zero3_offload 35% below it, and rightly failed: two GPUs delivered less than one (torchrun
gave each rank OMP_NUM_THREADS=1, so DeepSpeed's CPU Adam ran on one thread per rank instead of 32;
the message shows the threads per rank).

Weak scaling keeps the per-device batch (llmbench's default); strong scaling keeps the global
batch. On a CPU the efficiency is recorded without a verdict (smoke.py), unless the bound was
given on the command line: then it is judged, and the message says that CPU timings are smoke.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analysis.scaling import efficiency, lost_time, mode
from .outcome import CheckOutcome
from .smoke import cpu_caveat, cpu_smoke

if TYPE_CHECKING:
    from collections.abc import Mapping


def _unit(result: Mapping[str, Any], n: int) -> str:
    kind = "GPU" if result.get("device") == "cuda" else "rank"
    return f"{n} {kind}{'s' if n != 1 else ''}"


def _threads(result: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    """Host threads per rank when the run's share of the host was not chosen by llmbench's policy
    (config/host_share.py) and differs from the baseline's: offload's CPU Adam runs on them."""
    mine = (result.get("metadata") or {}).get("cpu_threads_per_rank")
    base = (baseline.get("metadata") or {}).get("cpu_threads_per_rank")
    share = (result.get("metadata") or {}).get("host_share") or {}
    if mine is None or base is None or mine == base or share.get("policy") == "share":
        return ""
    return (
        f" Host threads per rank: {base} at world size {baseline.get('world_size')}, {mine} at "
        f"{result.get('world_size')} ({share.get('note') or 'OMP_NUM_THREADS as set'}): work on the host, "
        "such as offload's optimizer step, got fewer cores per rank. Unset OMP_NUM_THREADS for llmbench's "
        "share (cores / ranks per rank, bound), or set it to that."
    )


def explain_loss(result: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    """' Of the 0.120 s lost per step: exposed communication 0.090 s, ...; most of it: ...', or ''
    where the profiled steps cannot say (no profile at N or at the baseline)."""
    lost = lost_time(dict(result), dict(baseline))
    if lost is None or lost.lost_sec <= 0:
        return ""
    if not lost.profiled:
        return ""  # nothing to split the loss by
    parts = ", ".join(f"{k} {v:.3f} s" for k, v in lost.parts().items() if v is not None)
    cause = lost.main_cause()
    comm = result.get("communication") or {}
    why = {
        "exposed communication": _comm_cause(comm),
        "waiting for the slowest rank": "one rank reaches the collectives late: see each rank's log, "
        "its GPU's clocks and temperature (gpu_monitor in result.json) and what else runs on its host",
        "host work": "the GPU waits for its host: offload's CPU optimizer and PCIe copies, the input "
        "pipeline or kernel launches; host_share in result.json says the cores and threads per rank",
        "other": "the profiled steps do not explain it (compute itself slower at this world size, or "
        "a part the profiler did not see)",
    }.get(cause or "", "")
    return f" Of the {lost.lost_sec:.3f} s lost per step against linear: {parts}; most of it {cause}: {why}."


def _comm_cause(comm: Mapping[str, Any]) -> str:
    """Latency- or bandwidth-bound: the step's collectives against the link probe at their size."""
    count, size, used = (
        comm.get("collectives_per_step"),
        comm.get("mean_message_bytes"),
        comm.get("link_used"),
    )
    if not count or not size:
        return "time in collectives that computation does not hide"
    text = f"{count:.0f} collectives per step of {size / 1e6:.2f} MB on average"
    if used is None:
        return text
    text += f", at {used:.0%} of the link's bus bandwidth at that size"
    if used < 0.5:
        return text + ": the link is not the limit; fewer, larger messages would be (bigger buckets)"
    return text + ": the link's bandwidth is the limit; less traffic (another strategy) or a faster link"


def _throughput(r: Mapping[str, Any]) -> float | None:
    """tokens/s: the repeats' mean where the run was repeated, else the run's."""
    rep = r.get("repeats") or {}
    return rep.get("tokens_per_sec_mean") or r.get("tokens_per_sec")


def _no_baseline(result: Mapping[str, Any], ws: int) -> CheckOutcome:
    """No verdict, and how to get one, for a run with nothing smaller to scale against."""
    name = "scaling"
    if result.get("mode") == "in-rank":
        return CheckOutcome(
            name,
            None,
            f"under torchrun every run has torchrun's world size ({ws}): to measure scaling, run pytest "
            "without torchrun with --llmbench-world-sizes=1,2 (each size its own torchrun group), or "
            "one torchrun session per world size into one results folder and `llmbench report` over it",
        )
    if ws == 1:
        return CheckOutcome(name, None, "world size 1 is the baseline larger world sizes are judged against")
    return CheckOutcome(
        name,
        None,
        f"no run of this configuration at a world size below {ws} in this session: add one "
        f"(--llmbench-world-sizes=1,{ws}) to measure scaling",
    )


_UNPROFILED = (
    " Communication, the host or a slow rank holds the group back: the profiled steps (on a GPU at 2 "
    "ranks and more, or --llmbench-profile) say which; or lower --llmbench-min-scaling."
)


def check_scaling(
    result: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    min_efficiency: float,
    *,
    explicit: bool = False,
) -> CheckOutcome:
    """Throughput at this world size against `baseline`, the same configuration at the smallest
    world size this session measured (None when there is none, or this run is it). `explicit`:
    the bound was given on the command line, so a CPU run is judged too (with the caveat)."""
    name = "scaling"
    ws = int(result.get("world_size") or 1)
    if baseline is None:
        return _no_baseline(result, ws)
    t, t0 = _throughput(result), _throughput(baseline)
    n0 = int(baseline.get("world_size") or 1)
    how = mode(dict(result), dict(baseline))
    if not t or not t0 or how is None:
        return CheckOutcome(
            name, None, "no throughput to compare, or neither the per-device nor the global batch matches"
        )
    eff = efficiency(t, ws, t0, n0)
    detail = (
        f"{how} scaling: {_unit(result, ws)} {t:,.0f} tokens/s against {_unit(result, n0)} {t0:,.0f}: "
        f"efficiency {eff:.0%} of linear ({ws / n0:g}x the baseline would be {ws / n0 * t0:,.0f})"
    )
    smoke = cpu_smoke(result)
    if smoke and not explicit:
        return CheckOutcome(name, None, f"{detail}. Not judged: {smoke}", eff, min_efficiency)
    caveat = cpu_caveat(result, "--llmbench-min-scaling") if explicit else ""
    if eff >= min_efficiency:
        explained = explain_loss(result, baseline)
        return CheckOutcome(
            name, True, f"{detail} >= {min_efficiency:.0%}{caveat}.{explained}", eff, min_efficiency
        )
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: scales poorly: {detail} < {min_efficiency:.0%}{caveat}."
        f"{explain_loss(result, baseline) or _UNPROFILED}{_threads(result, baseline)}",
        eff,
        min_efficiency,
    )
