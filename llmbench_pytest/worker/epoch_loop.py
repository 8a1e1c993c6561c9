"""Runs inside each rank: the encoder-decoder's loop, in epochs over a DataLoader (as the
encoder-decoder benchmark trains).

Warm-up epochs run first and are left out of every number. Each measured epoch is timed by the
host clock, synchronized at both ends, and holds:
- the steps (CUDA events or perf_counter around each step, as in the pre-training loop; their
  statistics are the run's step times, and their sum is the epoch's compute time),
- data wait: time the host spent blocked on the DataLoader for the next step's batches.
On a GPU the host runs ahead of the device, so a wait can overlap queued work and cost nothing;
the time it really cost is the device's idle time between steps, which results/build.py derives as
the epoch's wall time less its compute time. On the CPU the two coincide, less loop overhead.
When storage is slow the epoch's wall time grows while the step times do not: that gap is what
the data path costs.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import torch

from .faults import maybe_inject
from .loop import Feed, LoopSamples, Window, _backward, after_window
from .progress import note

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ..config.spec import RunSpec
    from .seq2seq_data import EpochData
    from .strategies import Strategy


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _epochs_from(data: EpochData, first: int) -> Iterator[torch.Tensor]:
    """Epoch after epoch, each started only when the one before is used up."""
    index = first
    while True:
        yield from data.epoch(index)
        index += 1


def epoch_loop(
    strategy: Strategy,
    data: EpochData,
    spec: RunSpec,
    device: torch.device,
    log: logging.Logger,
    rank: int = 0,
    trace_path: Path | None = None,
) -> LoopSamples:
    feed = Feed((), device)
    started = time.perf_counter()
    warmup_losses = _warmup_epochs(strategy, data, spec, feed, log)
    warmup_s = time.perf_counter() - started
    window = Window(device)
    step_losses: list[torch.Tensor] = []
    epochs: list[dict[str, Any]] = []
    window.open(feed)
    most = max_epochs(spec, data.plan.steps)
    stopped = "epochs"
    for e in itertools.count():
        stop, why = _before_epoch(e, most, spec, window, epochs, device, log)
        stopped = why or stopped
        if stop:
            break
        feed.source = data.epoch(spec.warmup_epochs + e)
        epoch = _measured_epoch(strategy, feed, window, step_losses, spec, e, data.plan.steps, rank, log)
        epochs.append(epoch)
        done = (e + 1) * data.plan.steps
        fields = {"phase": "measuring", "step": done, "steps": max(most, e + 1) * data.plan.steps}
        note(log, logging.INFO, fields, "epoch %d/%d: %d steps in %.2f s, %.2f s waiting for data",
             e + 1, max(most, e + 1), data.plan.steps, epoch["wall_sec"], epoch["data_wait_sec"])  # fmt: skip
    window.close(feed)

    # the census and profiled steps read on into the epochs after the measured ones
    feed.source = _epochs_from(data, spec.warmup_epochs + spec.epochs)
    started = time.perf_counter()
    census, trace = after_window(strategy, feed, spec, device, log, rank, trace_path)
    after_s = time.perf_counter() - started

    plan = {"mode": "epochs", "epochs": spec.epochs, "warmup_epochs": spec.warmup_epochs}
    if most > spec.epochs:
        plan |= {"max_epochs": most, "target_precision": spec.precision}
        if spec.window_budget_s:
            plan |= {"budget_s": spec.window_budget_s, "budget_precision": spec.budget_precision}
    samples = window.samples(
        step_losses,
        warmup_losses,
        census,
        trace,
        epochs=epochs,
        data=dict(data.info),
        stopped=stopped,
        plan=plan,
        warmup_s=warmup_s,
        after_s=after_s,
    )
    log.info(
        "measured %d epochs (%d steps) in %.3f s, loss %.4f -> %.4f",
        len(epochs),
        len(samples.step_times),
        samples.window_s,
        samples.losses[0],
        samples.losses[-1],
    )
    return samples


def max_epochs(spec: RunSpec, steps_per_epoch: int) -> int:
    """The most epochs a window measures. The asked-for epochs always run; unless the steps were
    fixed, whole epochs follow while the mean step time is known less well than spec.precision, up
    to the adaptive step cap (spec.max_epoch_steps), so that a jittery or data-bound workload
    measures until its precision is known or its bound is reached instead of failing on too few
    steps (1x H100, encoder-decoder fsdp, 2026-11-24: +-11.1% over 2 epochs of 20 steps). Past the
    cap, _measure_on decides, epoch by epoch, within the window's time budget."""
    if spec.max_epoch_steps <= 0 or steps_per_epoch <= 0:
        return spec.epochs
    return max(spec.epochs, spec.max_epoch_steps // steps_per_epoch)


def _before_epoch(
    e: int,
    most: int,
    spec: RunSpec,
    window: Window,
    epochs: list[dict[str, Any]],
    device: torch.device,
    log: logging.Logger,
) -> tuple[bool, str | None]:
    """Before measured epoch `e` (0-based): whether the window stops here, and what ends it (None
    leaves the reason as it was: "epochs" for the epochs asked for, "cap" once more followed)."""
    fixed = e >= most == spec.epochs  # the epochs asked for, no more
    capped = e >= most and spec.window_budget_s <= 0  # the cap, and no time budget to measure on in
    if fixed or capped or e < spec.epochs:
        return fixed or capped, None
    elapsed = sum(epoch["wall_sec"] for epoch in epochs)
    precision, elapsed = _over_ranks(window.clock.durations(), elapsed, device)
    if precision is not None and precision <= spec.precision:
        return True, "precision"
    if e < most:
        log.info("epoch %d of at most %d: the mean is known to +-%.1f%%, not yet +-%.1f%%",
                 e + 1, most, 100 * (precision or 0), 100 * spec.precision)  # fmt: skip
        return False, "cap"
    why = "budget" if elapsed >= spec.window_budget_s else "cap"
    if not _measure_on(spec, precision, elapsed):
        return True, why
    log.info("epoch %d, past the step cap: the mean is known to +-%.1f%%, short of the +-%.1f%% "
             "it is judged by; measuring on until %.0f s of the window's budget are spent "
             "(%.1f s so far)", e + 1, 100 * (precision or 0), 100 * spec.budget_precision,
             spec.window_budget_s, elapsed)  # fmt: skip
    return False, why


def _measure_on(spec: RunSpec, precision: float | None, elapsed_s: float) -> bool:
    """Past the step cap, whether another epoch follows: while the mean is known worse than the
    bound the mean_interval check judges it by (spec.budget_precision) and the window has not
    spent its time budget, as a window of steps goes on past its budget (worker/adaptive.py).
    Short steps reach the cap long before the budget: on 1x H100 the encoder-decoder's 0.07 to
    0.19 s steps ran 100 steps in 7 to 19 s and stopped at +-12 to +-14%, failing that check on a
    healthy run (2026-11-26-h100-whole-suite, calls E and F). No budget (the CPU default): the cap
    ends it."""
    if spec.window_budget_s <= 0 or elapsed_s >= spec.window_budget_s:
        return False
    return precision is None or precision > spec.budget_precision


def _over_ranks(times: list[float], elapsed_s: float, device: torch.device) -> tuple[float | None, float]:
    """The widest relative half-width of the mean step time over the ranks, and the longest
    measured time: one decision, the same on every rank, so that all run the same number of
    epochs."""
    import torch.distributed as dist

    from ..analysis.stats import mean_interval

    interval = mean_interval(times)
    mine = [interval.relative if interval is not None else float("inf"), elapsed_s]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        where = device if dist.get_backend() == "nccl" else torch.device("cpu")
        value = torch.tensor(mine, dtype=torch.float64, device=where)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        mine = [float(v) for v in value.tolist()]
    return (None if mine[0] == float("inf") else mine[0]), mine[1]


def _warmup_epochs(
    strategy: Strategy, data: EpochData, spec: RunSpec, feed: Feed, log: logging.Logger
) -> list[float]:
    """The unmeasured epochs first; their losses (warm-up is not timed: waiting here costs nothing)."""
    losses: list[float] = []
    steps = data.plan.steps
    for e in range(spec.warmup_epochs):
        feed.source = data.epoch(e)
        started = time.perf_counter()
        for _ in range(steps):
            loss = _backward(strategy, feed, spec.grad_accum)
            strategy.optimizer_step()
            losses.append(float(loss))
        fields = {"phase": "warmup", "step": (e + 1) * steps, "steps": spec.warmup_epochs * steps}
        note(log, logging.INFO, fields, "warm-up epoch %d/%d: %d steps in %.1f s, loss %.4f",
             e + 1, spec.warmup_epochs, steps, time.perf_counter() - started, losses[-1])  # fmt: skip
    return losses


def _measured_epoch(
    strategy: Strategy,
    feed: Feed,
    window: Window,
    step_losses: list[torch.Tensor],
    spec: RunSpec,
    e: int,
    steps: int,
    rank: int,
    log: logging.Logger,
) -> dict[str, Any]:
    """One measured epoch: each step timed, the wait for its batches apart, the wall clock around."""
    accum = spec.grad_accum
    _sync(feed.device)
    started = time.perf_counter()
    wait = 0.0
    for i in range(steps):
        if e == 0 and i == 0:
            maybe_inject(spec, rank)
        wait += feed.prefetch(accum)
        window.clock.begin()
        loss = _backward(strategy, feed, accum)
        window.clock.optimizer()
        strategy.optimizer_step()
        window.end_step()
        step_losses.append(loss)
        log.debug("epoch %d step %d/%d", e + 1, i + 1, steps)  # the launcher's heartbeat
    _sync(feed.device)
    # the epoch's compute time comes from the step times, combined over ranks (results/build.py)
    return {
        "epoch": e + 1,
        "steps": steps,
        "samples_per_rank": steps * accum * spec.per_device_batch,
        "wall_sec": time.perf_counter() - started,
        "data_wait_sec": wait,
    }
