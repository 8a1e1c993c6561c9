"""The seeds' validation checks, as functions over result documents. Standard library only.

Each check returns a CheckOutcome whose message shows the numbers and, when it fails, what to
change. `passed` is None when a check does not apply (memory on a CPU without a limit, the
sharding order at world size 1). The fixture records every outcome in result.json and then
fails the test with all failed messages.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .stats import third_means

# (lower, higher, strict): model states per rank must follow the sharding. ZeRO paper, fig. 1:
# ZeRO-1 partitions optimizer state, ZeRO-2 adds gradients, ZeRO-3 adds parameters.
SHARDING_ORDER: tuple[tuple[str, str, bool], ...] = (
    ("zero3", "zero2", True),
    ("zero2", "zero1", False),
    ("zero1", "ddp", True),
    ("fsdp", "ddp", True),
    ("fsdp_grad_op", "ddp", True),
    ("fsdp", "fsdp_grad_op", False),
)
STRICT_MARGIN = 0.01
"""'A < B' needs A at least 1% below B; 'A <= B' allows A up to 1% above B (allocator rounding)."""


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    passed: bool | None
    message: str
    measured: float | None = None
    limit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def check_step_time_cv(result: Mapping[str, Any], max_cv: float) -> CheckOutcome:
    """Step time consistent: coefficient of variation under the bound (seed 000: 10%). Runs in
    epochs are held to their epochs' wall times instead (see _epoch_time_cv)."""
    name = "step_time_cv"
    if result.get("epochs"):
        return _epoch_time_cv(result, result["epochs"], max_cv)
    cv = result.get("step_time_cv")
    if cv is None:
        return CheckOutcome(name, None, "no step times measured")
    detail = (
        f"CV {cv:.1%} (mean {result['mean_step_time_sec']:.4f} s, std {result['step_time_std_sec']:.4f} s, "
        f"min {result['step_time_min_sec']:.4f} s, max {result['step_time_max_sec']:.4f} s "
        f"over {result['steps']} steps)"
    )
    return _cv_verdict(
        result,
        cv,
        max_cv,
        quantity="step time",
        detail=detail,
        fix="Add warm-up (--llmbench-warmup) or steps (--llmbench-steps)",
    )


def _cv_verdict(
    result: Mapping[str, Any], cv: float, max_cv: float, *, quantity: str, detail: str, fix: str
) -> CheckOutcome:
    """The step-time check's outcome for a measured CV of `quantity` (`detail`: the numbers);
    `fix` is the first remedy, a quieter machine and a looser bound follow."""
    if cv <= max_cv:
        return CheckOutcome("step_time_cv", True, f"{quantity} {detail} <= {max_cv:.1%}", cv, max_cv)
    return CheckOutcome(
        "step_time_cv",
        False,
        f"{result.get('strategy')}: {quantity} varies too much: {detail} > {max_cv:.1%}. "
        f"{fix}, run on a quieter machine, or raise --llmbench-max-cv.",
        cv,
        max_cv,
    )


def _epoch_time_cv(result: Mapping[str, Any], epochs: list[Mapping[str, Any]], max_cv: float) -> CheckOutcome:
    """Epochs through a DataLoader: the epochs' wall times must agree. Their step times vary by
    design, with each batch's arrival and, where the GPU outruns a small model, with the host's
    kernel-launch jitter; what such a run reports is samples per second over whole epochs."""
    name = "step_time_cv"
    walls = [float(e["wall_sec"]) for e in epochs]
    if len(walls) < 2:
        return CheckOutcome(
            name, None, "one measured epoch: pass --llmbench-epochs=2 or more to see them agree"
        )
    mean = statistics.fmean(walls)
    if mean <= 0:
        return CheckOutcome(name, None, "the epochs took no measurable time")
    cv = statistics.stdev(walls) / mean
    steps = result.get("step_time_cv")
    detail = f"CV {cv:.1%} (mean {mean:.2f} s over {len(walls)} epochs" + (
        f"; step time CV {steps:.1%}, which data arrival moves by design)" if steps is not None else ")"
    )
    return _cv_verdict(
        result,
        cv,
        max_cv,
        quantity="epoch wall time",
        detail=detail,
        fix="Add warm-up epochs (--llmbench-warmup-epochs) or samples per epoch (--llmbench-dataset-samples)",
    )


def check_loss_falls(result: Mapping[str, Any]) -> CheckOutcome:
    """Loss trends down over the measured steps: the last third's mean below the first third's."""
    name = "loss_falls"
    losses = result.get("losses") or []
    if len(losses) < 2:
        return CheckOutcome(name, None, f"{len(losses)} measured step(s): need 2 or more to see a trend")
    first, last = third_means(losses)
    detail = (
        f"mean loss of the first third {first:.4f}, of the last third {last:.4f} over {len(losses)} steps"
    )
    if last < first:
        return CheckOutcome(name, True, f"loss falls: {detail}", last, first)
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: loss did not fall: {detail}. Training is not learning: check the "
        "learning rate (--llmbench-lr), the precision (--llmbench-dtype) and the strategy's optimizer.",
        last,
        first,
    )


def peer_key(result: Mapping[str, Any]) -> tuple[Any, ...]:
    """Runs whose memory may be compared: same model, shapes, precision and world size."""
    return (
        result.get("model"),
        result.get("seq_len"),
        result.get("per_device_batch"),
        result.get("grad_accum"),
        result.get("dtype"),
        result.get("world_size"),
        result.get("grad_ckpt"),
        result.get("device"),
    )


def check_sharding(result: Mapping[str, Any], peers: Mapping[str, Mapping[str, Any]]) -> CheckOutcome:
    """Model states per rank follow the sharding: ZeRO-3 < ZeRO-2 <= ZeRO-1 < DDP, FSDP < DDP
    (and FSDP <= its grad-op variant < DDP).

    `peers` maps strategy name -> an earlier successful result with the same peer_key.
    """
    name = "sharding_order"
    me = result.get("strategy")
    if (result.get("world_size") or 1) < 2:
        return CheckOutcome(name, None, "world size 1: nothing is sharded")
    if result.get("offload") != "none" or result.get("model_state_gb") is None:
        return CheckOutcome(name, None, "offload runs keep states in host memory; not compared")
    compared, failures = [], []
    for lower, higher, strict in SHARDING_ORDER:
        if me not in (lower, higher):
            continue
        other = higher if me == lower else lower
        peer = peers.get(other)
        if peer is None or peer.get("model_state_gb") is None:
            continue
        lo = result["model_state_gb"] if me == lower else peer["model_state_gb"]
        hi = peer["model_state_gb"] if me == lower else result["model_state_gb"]
        sign = "<" if strict else "<="
        holds = lo <= hi * (1 - STRICT_MARGIN) if strict else lo <= hi * (1 + STRICT_MARGIN)
        text = f"{lower} {lo:.4f} GB {sign} {higher} {hi:.4f} GB"
        compared.append(text)
        if not holds:
            failures.append(text)
    if not compared:
        return CheckOutcome(name, None, f"no run to compare {me} with in this session")
    ws = result.get("world_size")
    if failures:
        return CheckOutcome(
            name,
            False,
            f"model states per rank at world size {ws} do not follow the sharding: expected "
            + "; ".join(failures)
            + ". The strategy is not partitioning what it should: check its config in result.json "
            "(strategy_config).",
        )
    return CheckOutcome(name, True, f"model states per rank at world size {ws}: " + "; ".join(compared))


def check_repeat_spread(result: Mapping[str, Any], max_spread: float) -> CheckOutcome:
    """Repeats agree: each repeat's tokens/s within the bound of their mean (seed 001: ±5%)."""
    name = "repeat_spread"
    rep = result.get("repeats")
    if not rep or rep.get("count", 1) < 2:
        return CheckOutcome(name, None, "one run: pass --llmbench-repeat=N to measure the spread")
    rates = ", ".join(f"{r:,.1f}" for r in rep["tokens_per_sec"])
    detail = (
        f"tokens/s over {rep['count']} repeats: {rates} (mean {rep['tokens_per_sec_mean']:,.1f}, "
        f"std {rep['tokens_per_sec_std']:,.1f}); largest deviation {rep['max_deviation']:.1%}"
    )
    if rep["max_deviation"] <= max_spread:
        return CheckOutcome(name, True, f"{detail} <= {max_spread:.1%}", rep["max_deviation"], max_spread)
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: repeats disagree: {detail} > {max_spread:.1%}. Look for throttling, "
        "other jobs on the machine or a noisy interconnect; or raise --llmbench-max-repeat-spread.",
        rep["max_deviation"],
        max_spread,
    )


TIMING_AGREEMENT = 0.02
"""CUDA events summed over the steps may differ from the host clock around the window by 2%."""


def check_timing(result: Mapping[str, Any]) -> CheckOutcome:
    """On a GPU, per-step CUDA events and synchronize + host clock tell the same time."""
    name = "timing_agreement"
    timing = result.get("timing") or {}
    gap = timing.get("events_vs_clock")
    if result.get("device") != "cuda" or gap is None:
        return CheckOutcome(name, None, "CPU steps are timed by the host clock alone")
    if result.get("workload") == "seq2seq":
        # its window spans whole epochs, waits for the data loader included: the gap is the point
        return CheckOutcome(name, None, "epochs include waiting for data by design: see data_wait_fraction")
    detail = (
        f"CUDA events sum to {timing['sum_of_steps_sec']:.4f} s, the host clock around the synchronized "
        f"window reads {timing['window_sec']:.4f} s ({gap:+.2%})"
    )
    if abs(gap) <= TIMING_AGREEMENT:
        return CheckOutcome(name, True, f"{detail}, within {TIMING_AGREEMENT:.0%}", gap, TIMING_AGREEMENT)
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: {detail}, beyond {TIMING_AGREEMENT:.0%}: time passed between steps "
        "that no step accounts for (host stalls, data loading, other processes on the GPU).",
        gap,
        TIMING_AGREEMENT,
    )


CHECKS = ("memory", "step_time_cv", "loss_falls", "sharding", "repeat_spread", "timing")
