"""The session's progress on screen: which configuration of how many, where it is, time left.

On a terminal, a live region of two lines under pytest's own line (rich's Live display): the
configurations done and to do on a bar weighted by their expected cost, the elapsed time and
the ETA (session/eta.py says how it is estimated); then the running configuration's phase
(building, warm-up, measuring, profiling), step, precision, tokens/s so far and time. Off a
terminal (CI logs), with pytest's -s or with live logging (--log-cli-level), one line per
configuration as it starts and as it ends, with k/N and the ETA. -q keeps only the end lines
(the live region leaves nothing behind, so it stays); -qq shows nothing.

The display never runs in the ranks' timed code: in launcher mode it is fed from the launcher's
polling loop in this process (rank 0's heartbeat, under worker/progress.py's progress contract), and
in-process or in-rank, where the feed comes from the rank's own log records, it is not redrawn while
a window is being measured. Under torchrun only rank 0 shows it. It writes to the terminal only
while a benchmark trains, with pytest's capture suspended the way pytest's live logging does it, and
clears its region before pytest reports the test, so pytest's output and summary are intact.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from .eta import Eta, Planned, expected_seconds, start_kind
from .screen import Lines, Live, live_possible

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

    from ..config.spec import RunSpec
    from ..results.schema import RunResult

REDRAW_S = 0.5
"""The live region is redrawn at most this often, except when a phase starts or ends."""
PHASES = {
    "starting": "starting",
    "building": "building the model",
    "warmup": "warm-up",
    "measuring": "measuring",
    "profiling": "profiling",
    "done": "done",
}


class ProgressSink(Protocol):
    """What the llmbench fixture tells the display (worker/progress.py's progress contract)."""

    def config_started(self, nodeid: str, spec: RunSpec) -> None: ...
    def on_progress(self, event: dict[str, Any]) -> None: ...
    def config_finished(self, nodeid: str, result: RunResult | None) -> None: ...


class Quiet:
    """No display: ranks other than 0, pytest-xdist workers, -qq, nothing to run."""

    def config_started(self, nodeid: str, spec: RunSpec) -> None:
        pass

    def config_began(self, nodeid: str, spec: RunSpec | None, worker: str | None = None) -> int:
        return 0

    def config_ended(self, nodeid: str, ok: bool, at: float | None = None) -> None:
        pass

    def on_progress(self, event: dict[str, Any]) -> None:
        pass

    def config_finished(self, nodeid: str, result: RunResult | None) -> None:
        pass

    def item_done(self, nodeid: str) -> None:
        pass

    def close(self) -> None:
        pass


def build_plan(
    items: list[pytest.Item], repeats: int = 1, at_once: Callable[[RunSpec], int] | None = None
) -> list[Planned]:
    """The configurations that will train, in order: every selected llmbench item not skipped;
    `at_once` says how many train at once with each (session/side_by_side.py)."""
    plan, seen = [], {}
    for item in items:
        spec = getattr(getattr(item, "callspec", None), "params", {}).get("llmbench")
        if spec is None or item.get_closest_marker("skip") is not None:
            continue
        together = at_once(spec) if at_once is not None else 1
        guess = expected_seconds(spec, repeats, start_kind(spec, seen, together))
        plan.append(Planned(item.nodeid, item.name, spec.name, guess, together))
    return plan


def duration(seconds: float) -> str:
    """0:42, 12:05, 1:02:03."""
    s = max(round(seconds), 0)
    hours, rest = divmod(s, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def where(event: dict[str, Any]) -> str:
    """The running configuration's state from its latest progress event; any key may be missing."""
    phase = event.get("phase")
    parts = []
    if phase in PHASES:
        text = PHASES[phase]
        step, steps = event.get("step"), event.get("steps")
        if isinstance(step, int) and phase in ("warmup", "measuring"):
            text += f" step {step}" + (f"/{steps}" if isinstance(steps, int) else "")
        precision = event.get("precision")
        if phase == "measuring" and isinstance(precision, (int, float)):
            text += f" ±{precision:.1%}"
        parts.append(text)
    elif event.get("message"):
        parts.append(str(event["message"]).splitlines()[0][:80])
    rate = event.get("tokens_per_sec")
    if isinstance(rate, (int, float)) and rate > 0:
        parts.append(f"{rate:,.0f} tokens/s")
    return " · ".join(parts)


class Progress:
    """The plan's state, told to a screen: live region or lines."""

    def __init__(self, plan: list[Planned], screen: Any, quiet: bool = False, in_rank: bool = False):
        self.eta = Eta({p.nodeid: p for p in plan})
        self.screen = screen
        self.quiet = quiet
        """-q: end lines only."""
        self.in_rank = in_rank
        """Events come from the rank's own thread: draw nothing while it measures."""
        self.workers = 1
        self.session_start = time.monotonic()
        self.current: dict[str, Any] = {}
        self._last_draw = 0.0

    def add_plan(self, plan: list[Planned], workers: int) -> None:
        """Under pytest-xdist the controller learns the plan from the first worker's report."""
        for p in plan:
            self.eta.plan.setdefault(p.nodeid, p)
        self.workers = max(workers, 1)

    def _counts(self, k: int | None = None) -> str:
        n = len(self.eta.plan)
        return f"[{k}/{n}]" if k is not None else f"{len(self.eta.finished)}/{n}"

    def _eta_text(self) -> str:
        return "ETA " + duration(self.eta.remaining_s(time.monotonic(), self.workers))

    def _beside_text(self) -> str:
        running = self.eta.running()
        return f"{running} training at once · " if running > 1 else ""

    def _label(self, nodeid: str) -> str:
        planned = self.eta.plan.get(nodeid)
        return planned.label if planned else nodeid.rsplit("::", 1)[-1]

    def config_began(self, nodeid: str, spec: RunSpec | None, worker: str | None = None) -> int:
        """A configuration started training, maybe on a lane ahead of its test (the live region
        keeps showing the one pytest waits for); returns its k. Told once: a later call for the
        same configuration changes nothing."""
        if nodeid in self.eta.started:
            return self.eta.place(nodeid) or 0
        if nodeid not in self.eta.plan and spec is not None:
            self.eta.plan[nodeid] = Planned(
                nodeid, nodeid.rsplit("::", 1)[-1], spec.name, expected_seconds(spec)
            )
        k = self.eta.start(nodeid, time.monotonic())
        if not hasattr(self.screen, "show") and not self.quiet:
            who = f"{worker} " if worker else ""
            elapsed = duration(time.monotonic() - self.session_start)
            self.screen.line(
                f"llmbench {self._counts(k)} {who}{self._label(nodeid)} started · {elapsed} elapsed · "
                f"{self._eta_text()}"
            )
        return k

    def config_started(self, nodeid: str, spec: RunSpec | None, worker: str | None = None) -> None:
        """pytest's test for this configuration began: the live region shows it."""
        k = self.config_began(nodeid, spec, worker)
        self.current = {"nodeid": nodeid, "k": k, "event": {}, "worker": worker}
        if hasattr(self.screen, "show"):
            self._draw(force=True)

    def config_ended(self, nodeid: str, ok: bool, at: float | None = None) -> None:
        """A configuration on a lane ended (at `at`, monotonic): the ETA learns its own wall time,
        not the time until pytest's test reports it."""
        self.eta.finish(nodeid, at if at is not None else time.monotonic(), learn=ok)

    def on_progress(self, event: dict[str, Any]) -> None:
        if not self.current or not hasattr(self.screen, "show"):
            return
        phase_changed = event.get("phase") != self.current["event"].get("phase")
        self.current["event"] = event
        if self.in_rank and event.get("phase") == "measuring":
            return  # the display runs in the rank's thread here: not inside its timed window
        self._draw(force=phase_changed)

    def config_finished(
        self,
        nodeid: str,
        result: RunResult | None,
        worker: str | None = None,
        summary: dict[str, Any] | None = None,
    ) -> None:
        outcome = summary if summary is not None else (dict(result.data) if result is not None else {})
        status = outcome.get("status") or "stopped"
        # a run that failed or was stopped says nothing about how long the others take
        wall = self.eta.finish(nodeid, time.monotonic(), learn=status == "ok")
        k = self.eta.place(nodeid)
        self.current = {}
        if hasattr(self.screen, "hide"):
            self.screen.hide()
            return
        text = f"{status} in {wall:.1f} s" if wall is not None else str(status)
        rate = outcome.get("tokens_per_sec")
        if isinstance(rate, (int, float)) and rate > 0:
            text += f", {rate:,.0f} tokens/s"
        who = f"{worker} " if worker else ""
        self.screen.line(f"llmbench {self._counts(k)} {who}{self._label(nodeid)} {text} · {self._eta_text()}")

    def item_done(self, nodeid: str) -> None:
        """An item of the plan ended without training (skipped or failed in setup): no longer due."""
        if nodeid in self.eta.plan and nodeid not in self.eta.finished:
            self.eta.finish(nodeid, time.monotonic(), learn=False)

    def close(self) -> None:
        """Clear the live region before pytest writes (a report, an interrupt, the summary)."""
        self.current = {}
        if hasattr(self.screen, "hide"):
            self.screen.hide()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_S:
            return
        self._last_draw = now
        self.screen.show(self._render(now))

    def _render(self, now: float) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        head = Table.grid(padding=(0, 1))
        head.add_row(
            Text("llmbench", style="bold"),
            ProgressBar(total=1.0, completed=self.eta.done_fraction(now), width=30),
            Text(
                f"configuration {self.current.get('k')} of {len(self.eta.plan)} · "
                f"{self._beside_text()}"
                f"{duration(now - self.session_start)} elapsed · {self._eta_text()}"
            ),
        )
        nodeid = self.current.get("nodeid", "")
        event = self.current.get("event", {})
        began = self.eta.started.get(nodeid, now)
        state = where(event)
        line = Text(f"  {self._label(nodeid)}", style="cyan", no_wrap=True, overflow="ellipsis")
        line.append(f"  {state + ' · ' if state else ''}{duration(now - began)}", style="default")
        return Group(head, line)


def for_controller(config: pytest.Config) -> Progress | Quiet:
    """The pytest-xdist controller's display: lines (xdist writes to the terminal as reports come
    in, so no live region), the plan arriving with the workers' first reports."""
    if config.get_verbosity() <= -2:
        return Quiet()
    return Progress([], Lines(config), quiet=config.get_verbosity() < 0)


def for_session(config: pytest.Config, plan: list[Planned], writer: bool, in_rank: bool) -> Progress | Quiet:
    """The display this process shows: none on other ranks, with -qq, or when nothing trains."""
    verbosity = config.get_verbosity()
    if not writer or verbosity <= -2 or not plan:
        return Quiet()
    screen = Live(config) if live_possible(config) else Lines(config)
    return Progress(plan, screen, quiet=verbosity < 0, in_rank=in_rank)
