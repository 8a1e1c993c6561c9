"""Where the progress display writes: a live region under pytest's line, or plain lines.

Both write to the terminal only with pytest's capture suspended, the way pytest's own live
logging does (capturemanager's global_and_fixture_disabled), so nothing lands in a test's
captured output and nothing is written while pytest itself writes.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pytest


class Lines:
    """One line at a time through pytest's terminal reporter, with capture suspended as pytest's
    live logging does it (the line lands in the terminal or CI log, not in the test's output)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def line(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        with capture_suspended(self.config):
            reporter.write_line(text)
            reporter.flush()


class Live:
    """rich's Live display in the lines under pytest's current one. pytest leaves its cursor at
    the end of a line it has not finished ("benchmarks/test_pretrain.py .."), so the region
    starts on the next line and, when it is cleared, the cursor goes back where pytest left it.
    Redrawn only when told to (no refresh thread), always with capture suspended."""

    def __init__(self, config: pytest.Config) -> None:
        from rich.console import Console

        self.config = config
        self.writer = config.get_terminal_writer()
        # file=None: rich writes to sys.stdout as it is at that moment, the terminal while
        # capture is suspended
        self.console = Console(force_terminal=True, width=self.writer.fullwidth, highlight=False)
        self.live: Any = None

    def show(self, renderable: Any) -> None:
        from rich.live import Live as RichLive

        with capture_suspended(self.config):
            try:
                if self.live is None:
                    sys.stdout.write("\n")  # leave pytest's unfinished line alone
                    self.live = RichLive(
                        renderable,
                        console=self.console,
                        auto_refresh=False,
                        transient=True,
                        redirect_stdout=False,
                        redirect_stderr=False,
                    )
                    self.live.start(refresh=True)
                else:
                    self.live.update(renderable, refresh=True)
            except OSError:
                self.live = None  # a closed terminal must not end a measurement

    def hide(self) -> None:
        if self.live is None:
            return
        live, self.live = self.live, None
        with capture_suspended(self.config):
            try:
                live.stop()  # transient: erases the region, the cursor at its first line
                column = self.writer.width_of_current_line % max(self.writer.fullwidth, 1)
                sys.stdout.write(f"\x1b[1A\x1b[{column + 1}G")  # back to the end of pytest's line
                sys.stdout.flush()
            except OSError:
                pass


@contextlib.contextmanager
def capture_suspended(config: pytest.Config) -> Iterator[None]:
    capman = config.pluginmanager.get_plugin("capturemanager")
    if capman is None:
        yield
        return
    with capman.global_and_fixture_disabled():
        yield


def live_possible(config: pytest.Config) -> bool:
    """A live region needs a terminal that nothing else writes to while a benchmark trains:
    not with -s (the test's output goes straight to it) nor with live logging."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not getattr(reporter, "isatty", False):
        return False
    if config.getoption("capture", "fd") == "no" or config.getoption("log_cli_level", None):
        return False
    if config.getini("log_cli"):
        return False
    try:
        import rich.live  # noqa: F401
    except ImportError:
        return False  # lines instead; rich comes with llmbench, but a hand-made environment may lack it
    return True
