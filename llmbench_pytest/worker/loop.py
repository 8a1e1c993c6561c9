"""Runs inside each rank: the timed training loop.

Warm-up steps run first and are left out of every number. During the measured steps nothing
waits for the device: losses stay on the device until the window closes, step times come from
events, and the only host work is queueing the step. The window holds a fixed count of steps or,
by default, as many as it takes to know the mean step time to the precision asked (adaptive.py:
check points every few steps read the finished steps without waiting for the device). The last
warm-up step takes a census of live tensors when its last backward ends, before its optimizer
step, when parameters, gradients and optimizer state all exist (an untimed step after the window
takes it instead where the warm-up is a single step, or torch.compile runs: `census_in_warmup`);
after the window, if asked, a few steps run under the profiler.
NVML samples the GPU in a background thread for the length of the window.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .adaptive import CAP, FIXED, STOPPED_BY, StopRule, check_point
from .faults import maybe_inject
from .gc_pauses import GcPauses, collect_before_window
from .memory import PeakMemory, census_at_end_of_backward, census_bytes
from .monitor import GpuMonitor
from .profiling import profile_steps
from .progress import note
from .timing import OptimizerHostClock, StepClock

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from ..config.spec import RunSpec
    from .dist import DistContext
    from .strategies import Strategy


def extra_steps(spec: RunSpec) -> int:
    """Untimed steps after the window (the census step where the warm-up took none, the profiled
    steps): the feed covers them."""
    return 1 + spec.profile_steps


@dataclass
class LoopSamples:
    """One rank's raw measurements."""

    step_times: list[float]
    losses: list[float]
    """Mean loss over each measured step's micro-batches."""
    warmup_losses: list[float]
    window_s: float
    timing_method: str
    census: dict[str, int]
    """Live tensor bytes by device type after the census step's backward."""
    h2d_bytes: int
    memory: dict[str, int | bool | None] = field(default_factory=dict)
    gpu_monitor: dict[str, Any] | None = None
    gpu_monitor_error: str | None = None
    trace: dict[str, Any] | None = None
    """TraceSummary of the profiled steps."""
    epochs: list[dict[str, Any]] | None = None
    """Epoch-based workloads (seq2seq): each measured epoch's wall time, steps and data wait."""
    data: dict[str, Any] | None = None
    """Epoch-based workloads: where the samples came from (memory, or which shards on disk)."""
    warmup_s: float = 0.0
    """Host time of the warm-up steps (not measured: for the time-to-answer accounting)."""
    warmup_step_s: list[float] = field(default_factory=list)
    """Each warm-up step's host time, ending when its loss reached the host: where the warm-up
    default comes from (how many steps a configuration takes to settle)."""
    after_s: float = 0.0
    """Host time of the untimed steps after the window (census, profiled steps)."""
    window_started_unix: float | None = None
    """When the window opened (wall clock)."""
    stopped: str = "fixed"
    """Why the window ended: fixed (a set count or epochs), precision (reached), cap (reached first)."""
    plan: dict[str, Any] = field(default_factory=dict)
    """What the measurement was asked for (adaptive.StopRule.plan)."""
    gc_pauses: dict[str, Any] | None = None
    """Python's garbage collections inside the window and the time they held the host (gc_pauses.py)."""
    optimizer_times: list[float] = field(default_factory=list)
    """Each measured step's optimizer share (StepClock.optimizer): what sharding the optimizer divides."""
    optimizer_host_times: list[float] = field(default_factory=list)
    """Each measured step's host time inside torch's optimizer step (OptimizerHostClock): this
    rank's own work, without the collectives around it."""


class Feed:
    """Hands out host micro-batches, copies each to the device, and counts the bytes copied.

    `source` is any iterator of host batches: the pre-made list of the pre-training loop, or an
    epoch's DataLoader. `prefetch` takes a step's batches from the source ahead of the step, so
    that the time spent waiting for them can be told apart from the step itself.
    """

    def __init__(self, source: Iterable[torch.Tensor], device: torch.device) -> None:
        self.device = device
        self.source: Iterator[torch.Tensor] = iter(source)
        self.pending: list[torch.Tensor] = []
        self.h2d_bytes = 0

    def prefetch(self, count: int) -> float:
        """Take `count` batches from the source now; returns the seconds spent waiting for them."""
        started = time.perf_counter()
        self.pending.extend(next(self.source) for _ in range(count))
        return time.perf_counter() - started

    def next(self) -> torch.Tensor:
        host = self.pending.pop(0) if self.pending else next(self.source)
        if self.device.type == "cuda":
            self.h2d_bytes += host.numel() * host.element_size()
        return host.to(self.device, non_blocking=True)


def _backward(strategy: Strategy, feed: Feed, accum: int) -> torch.Tensor:
    losses = [strategy.micro_step(feed.next(), micro == accum - 1) for micro in range(accum)]
    return torch.stack(losses).mean()


def census_step(strategy: Strategy, feed: Feed, accum: int) -> tuple[torch.Tensor, dict[str, int], float]:
    """One step's forward and backward with the census taken when its last backward ends
    (memory.py): the step's loss, the census, and the seconds the census took (not the step's).
    The optimizer step is the caller's."""
    losses = [strategy.micro_step(feed.next(), False) for _ in range(accum - 1)]
    module = getattr(getattr(strategy, "built", None), "module", None)

    def last() -> None:
        losses.append(strategy.micro_step(feed.next(), True))

    census, seconds = census_at_end_of_backward(module, last) if module is not None else (None, 0.0)
    if module is None:
        last()
    if census is None:  # no output of the module reached backward: count after the strategy's backward
        started = time.perf_counter()
        census = census_bytes()
        seconds = time.perf_counter() - started
    return torch.stack(losses).mean(), census, seconds


def census_in_warmup(spec: RunSpec) -> bool:
    """Whether the last warm-up step takes the census: with two warm-up steps or more, its
    backward holds what the window's do (the optimizer's state exists from the first step on),
    and no step is spent on it after the window (on 1x H100 that step cost 0.2 to 0.7 s of every
    configuration, 2026-11-26). With one, or under torch.compile (the census's forward hook
    would recompile the module in front of the window), it takes a step after the window."""
    return spec.warmup >= 2 and not spec.compile


def after_window(
    strategy: Strategy,
    feed: Feed,
    spec: RunSpec,
    device: torch.device,
    log: logging.Logger,
    rank: int,
    trace_path: Path | None,
    census: dict[str, int] | None = None,
) -> tuple[dict[str, int], dict[str, Any] | None]:
    """The untimed steps after the window: the census step (unless the warm-up took the census),
    then the profiled steps if asked."""
    accum = spec.grad_accum
    if census is None:
        _, census, _ = census_step(strategy, feed, accum)
        strategy.optimizer_step()
    if not spec.profile_steps:
        return census, None

    def step() -> None:
        _backward(strategy, feed, accum)
        strategy.optimizer_step()

    keep = trace_path if (spec.trace and rank == 0) else None
    note(log, logging.INFO, {"phase": "profiling", "step": 0, "steps": spec.profile_steps},
         "profiling %d untimed steps", spec.profile_steps)  # fmt: skip
    # the host's operators name the attention that --llmbench-attention asked for (trace.py), and
    # a trace --llmbench-profile keeps has them on every rank
    host_ops = spec.attention != "default" or spec.trace
    trace = profile_steps(
        step, spec.profile_steps, device, keep, host_ops=host_ops, world_size=spec.world_size
    ).to_dict()
    log.info(
        "profiled %d steps: %.4f s in collectives per step", spec.profile_steps, trace["comm_sec_per_step"]
    )
    return census, trace


class Window:
    """The measured window's instruments, opened and closed in one order by every loop: peak
    memory reset, the NVML sampler, the step clock; closed in reverse before any untimed step."""

    def __init__(self, device: torch.device) -> None:
        self.clock = StepClock(device)
        self.optimizer_host = OptimizerHostClock()
        self.peak = PeakMemory(device)
        self.monitor = GpuMonitor(device)
        self.collector = GcPauses()
        self.gpu: dict[str, Any] | None = None
        self.gc_pauses: dict[str, Any] | None = None
        self.memory: dict[str, int | bool | None] = {}
        self.h2d_bytes = 0

    def open(self, feed: Feed) -> None:
        collect_before_window()
        feed.h2d_bytes = 0
        self.peak.reset()
        self.monitor.start()
        self.collector.start()
        self.optimizer_host.start()
        self.clock.start_window()

    def end_step(self) -> None:
        """A measured step's end: its time, and its optimizer's host time."""
        self.clock.end()
        self.optimizer_host.end_step()

    def close(self, feed: Feed) -> None:
        self.clock.end_window()
        self.optimizer_host.stop()
        self.gc_pauses = self.collector.stop()
        self.gpu = self.monitor.stop()
        self.memory = self.peak.read()
        self.h2d_bytes = feed.h2d_bytes

    def samples(
        self,
        step_losses: list[torch.Tensor],
        warmup_losses: list[float],
        census: dict[str, int],
        trace: dict[str, Any] | None,
        **extra: Any,
    ) -> LoopSamples:
        """What the window measured; the losses leave the device here, after the window."""
        return LoopSamples(
            step_times=self.clock.durations(),
            losses=[float(v) for v in torch.stack(step_losses).float().cpu()],
            warmup_losses=warmup_losses,
            window_s=self.clock.window_s,
            window_started_unix=self.clock.window_started_unix,
            timing_method=self.clock.method,
            census=census,
            h2d_bytes=self.h2d_bytes,
            memory=self.memory,
            gpu_monitor=self.gpu,
            gpu_monitor_error=self.monitor.error,
            trace=trace,
            gc_pauses=self.gc_pauses,
            optimizer_times=self.clock.optimizer_durations(),
            optimizer_host_times=self.optimizer_host.steps,
            **extra,
        )


def timed_loop(
    strategy: Strategy,
    batches: list[torch.Tensor],
    spec: RunSpec,
    ctx: DistContext,
    log: logging.Logger,
    trace_path: Path | None = None,
) -> LoopSamples:
    accum = spec.grad_accum
    # the batches made for the cap come round again when a budgeted window goes past it (adaptive.py)
    feed = Feed(itertools.cycle(batches), ctx.device)
    warmup_losses = []
    warmup_step_s = []
    census = None
    started = time.perf_counter()
    for i in range(spec.warmup):
        began = time.perf_counter()
        counted = 0.0
        if i == spec.warmup - 1 and census_in_warmup(spec):
            loss, census, counted = census_step(strategy, feed, accum)
        else:
            loss = _backward(strategy, feed, accum)
        strategy.optimizer_step()
        # waits for the device (the loss reaches the host): a step's whole time, by the host clock,
        # less the census's own (tools/warmup_steps.py reads these as how steps settle)
        warmup_losses.append(float(loss))
        warmup_step_s.append(time.perf_counter() - began - counted)
        note(log, logging.INFO, {"phase": "warmup", "step": i + 1, "steps": spec.warmup},
             "warmup %d/%d loss %.4f", i + 1, spec.warmup, warmup_losses[-1])  # fmt: skip

    warmup_s = time.perf_counter() - started
    rule = StopRule.of(spec)
    window = Window(ctx.device)
    step_losses: list[torch.Tensor] = []
    stopped = FIXED if not rule.adaptive else CAP
    window.open(feed)
    check_after = rule.first_check
    for i in range(rule.last):
        if i == 0:
            maybe_inject(spec, ctx.rank)
        window.clock.begin()
        loss = _backward(strategy, feed, accum)
        window.clock.optimizer()
        strategy.optimizer_step()
        window.end_step()
        step_losses.append(loss)
        # the launcher's heartbeat (written at most once a second); costs microseconds
        beat = {"phase": "measuring", "step": i + 1, "steps": max(rule.cap, i + 1)}
        log.debug("step %d/%d", i + 1, rule.cap, extra={"progress": beat})
        why = None
        if i + 1 == check_after and i + 1 < rule.last:  # at the last step the window closes anyway
            why, check_after = check_point(ctx, window.clock, rule, i + 1, spec.tokens_per_step, log)
        if why is not None:
            stopped = why
            break
    window.close(feed)
    started = time.perf_counter()
    census, trace = after_window(strategy, feed, spec, ctx.device, log, ctx.rank, trace_path, census)
    after_s = time.perf_counter() - started

    samples = window.samples(
        step_losses,
        warmup_losses,
        census,
        trace,
        stopped=stopped,
        plan=rule.plan(),
        warmup_s=warmup_s,
        warmup_step_s=warmup_step_s,
        after_s=after_s,
    )
    log.info(
        "measured %d steps in %.3f s (%s), loss %.4f -> %.4f",
        len(samples.step_times),
        samples.window_s,
        STOPPED_BY[stopped],
        samples.losses[0],
        samples.losses[-1],
    )
    return samples
