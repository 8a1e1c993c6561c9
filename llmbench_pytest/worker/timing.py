"""Runs inside each rank: per-step timing without disturbing the steps.

On a GPU each step is bracketed by CUDA events, so no step waits for the device: the host
keeps queueing work exactly as an untimed loop would. The measured window is also timed by
the host clock between two synchronizations, which gives the suite an independent total to
check the events against. On the CPU, perf_counter brackets each step. While the window runs,
`completed()` asks the events which steps the device has finished, without waiting for it: that is
what adaptive measurement and the progress display read.
"""

from __future__ import annotations

import time

import torch


class StepClock:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._marks: list[tuple[object, object]] = []
        self._seconds: list[float] = []
        """Durations of the first steps, read once: a check point asks again for every step so far."""
        self._open: object | None = None
        self._mids: list[object] = []
        self._done = 0
        self._window_start = 0.0
        self.window_s = 0.0
        """Host-clock time of the whole measured window, synchronized at both ends."""
        self.window_started_unix: float | None = None
        """When the window opened, by the wall clock: where windows that ran side by side overlap
        (tools/time_to_answer.py counts the wall time with a window open once)."""

    def _now(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start_window(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self._window_start = time.perf_counter()
        self.window_started_unix = time.time()

    def end_window(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self.window_s = time.perf_counter() - self._window_start

    def begin(self) -> None:
        self._open = self._now()

    def optimizer(self) -> None:
        """Between a step's backward and its optimizer step: the optimizer's share of each step is
        then the time from here to end() (at two ranks and more DeepSpeed's epilogue, its last
        reductions and the updated parameters' all-gather, runs in it too)."""
        self._mids.append(self._now())

    def end(self) -> None:
        assert self._open is not None, "end() without begin()"
        self._marks.append((self._open, self._now()))
        self._open = None

    def optimizer_durations(self) -> list[float]:
        """Seconds from optimizer() to end() of every step that marked it; after end_window()."""
        out = []
        for mid, (_, e) in zip(self._mids, self._marks, strict=False):
            if self.cuda:
                out.append(mid.elapsed_time(e) / 1000.0)  # type: ignore[attr-defined]
            else:
                out.append(float(e) - float(mid))  # type: ignore[arg-type]
        return out

    def completed(self) -> int:
        """How many steps, from the first, the device has finished: without waiting for it (the
        events of one stream complete in order, so the first unfinished one ends the count)."""
        if not self.cuda:
            return len(self._marks)
        done = self._done
        while done < len(self._marks) and self._marks[done][1].query():  # type: ignore[attr-defined]
            done += 1
        self._done = done
        return done

    def durations(self, count: int | None = None) -> list[float]:
        """Seconds per step of the first `count` steps (all by default); those steps must have
        completed: after end_window(), or as many as completed() says."""
        count = len(self._marks) if count is None else count
        for s, e in self._marks[len(self._seconds) : count]:
            if self.cuda:
                self._seconds.append(s.elapsed_time(e) / 1000.0)  # type: ignore[attr-defined]
            else:
                self._seconds.append(float(e) - float(s))  # type: ignore[arg-type]
        return self._seconds[:count]

    @property
    def method(self) -> str:
        return "cuda_events" if self.cuda else "perf_counter"


class OptimizerHostClock:
    """The host's time inside torch's optimizer step, step by step, on this rank.

    Measured around every torch optimizer's step (global step hooks; DeepSpeed's and bitsandbytes'
    optimizers are torch optimizers too), so it holds this rank's own work and nothing it waits
    for: no strategy runs a collective inside the step of the optimizer it wraps (DeepSpeed's
    reductions and its all-gather of the updated weights come before and after; the optimizer
    phase of StepClock holds those too, so a rank slowed there makes every rank's phase long).
    On a GPU it is the step's host side (launches, a CPU optimizer, a host that is held up), on a
    CPU all of it. What the straggler finding (analysis/straggler.py) compares between ranks."""

    def __init__(self) -> None:
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._began: float | None = None
        self._held = 0.0
        self.steps: list[float] = []

    def start(self) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.stop()
        self.steps = []
        self._held = 0.0

        def before(*_: object) -> None:
            self._began = time.perf_counter()

        def after(*_: object) -> None:
            if self._began is not None:
                self._held += time.perf_counter() - self._began
                self._began = None

        # registered before any hook of the step (an injected fault's is added at the first
        # measured step), so a pre-hook that holds the host up is inside the time measured
        self._handles = [register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after)]

    def end_step(self) -> None:
        """The optimizer's host time of the step that just ended (0 where it did not step)."""
        self.steps.append(self._held)
        self._held = 0.0

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
