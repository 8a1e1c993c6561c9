"""What the regression gate found, and how it reads: each change with its interval and p-value,
the history's findings, the table and the verdict line. run.py computes; this module prints.

Standard library and tabulate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tabulate import tabulate

from ...analysis.significance import IMPROVED, INCONCLUSIVE, REGRESSION, Estimate
from ...config.gate_bounds import GateBounds, min_history
from .. import fmt
from ..fmt import colalign

if TYPE_CHECKING:
    from pathlib import Path

    from ..records import RecordKey, RecordSet
    from .history import HistoryFinding

MOST_REPEATS = 100
"""The most runs a side the gate suggests; a change that needs more sits on its bound."""
METHODS = (
    "methods: speed by sessions as the unit (a t-test on the log of each session's mean step time against "
    "the spread between sessions: measured where a side has 2+ sessions or a history has earlier ones, "
    "else the spread measured for the strategy on this hardware, named per line); peak memory: exact "
    "where the peaks agree, tested with repeats or a history, else the bound only"
)
HISTORY_OPTION = "--history DIR"
"""How `llmbench gate` is given earlier runs; gate_session names the pytest option instead."""
SESSIONS_OPTION = "run the suite N times on each side into one folder and pass --sessions N"
"""How a side gets N sessions (`llmbench gate`); inside pytest, N sessions of each side."""


@dataclass(frozen=True)
class Change:
    """One metric of one configuration, baseline against current."""

    key: RecordKey
    metric: str
    """'tokens/s', 'step time', 'peak memory' or 'status'."""
    baseline: float | str
    current: float | str
    estimate: Estimate | None
    """The change with its interval and p-value (None for status)."""
    bound: float | None
    verdict: str
    repeats_needed: int | None = None
    """Sessions a side (runs a side, for memory) that would settle an inconclusive change, if its
    size and spread held."""
    catch: int | None = None
    """Sessions a side that catch a slowdown of twice the step-time bound 95% of the time, from the
    spread between sessions (speed metrics); None where nothing measured it or over 100."""
    spread: str = ""
    """The spread between sessions the speed decision used, and where it came from."""

    @property
    def change(self) -> float | None:
        return self.estimate.change if self.estimate else None

    def _value(self, v: float | str) -> str:
        if isinstance(v, str):
            return v
        if self.metric == "tokens/s":
            return fmt.tokens(v)
        if self.metric == "step time":
            return fmt.seconds(v) + " s"
        return fmt.gb(v) + " GB"

    def interval(self) -> str:
        est = self.estimate
        if est is None or not est.tested:
            return fmt.NA
        lo, hi = est.interval
        return f"{fmt.signed_pct(lo)} .. {fmt.signed_pct(hi)}"

    def p(self) -> str:
        est = self.estimate
        if est is None or est.p_value is None:
            return fmt.NA
        return "<0.001" if est.p_value < 0.001 else f"{est.p_value:.3f}"

    def settle(self) -> str:
        """For an inconclusive change: how many sessions (runs, for memory) a side would settle it."""
        est = self.estimate
        if self.verdict != INCONCLUSIVE or est is None:
            return ""
        unit = "runs" if self.metric == "peak memory" else "sessions"
        if self.repeats_needed is None and not est.tested:
            return f"; nothing measured the spread between sessions: {SESSIONS_OPTION} (2 or more)"
        if self.repeats_needed is None:
            return (
                f"; no count of {unit} up to {MOST_REPEATS} a side settles it: the change sits on the bound"
            )
        how = (
            "--llmbench-repeat" if unit == "runs" else SESSIONS_OPTION.replace("N", str(self.repeats_needed))
        )
        return f"; about {self.repeats_needed} {unit} a side would settle it ({how})"

    def line(self) -> str:
        what = (
            f"{self.key.label()}: {self.metric} {self._value(self.baseline)} -> {self._value(self.current)}"
        )
        est = self.estimate
        if est is None:
            return what
        sign = "-" if self.metric == "tokens/s" else "+"
        bound = f"bound {sign}{fmt.pct(self.bound)}"
        if not est.tested:
            return f"{what} ({fmt.signed_pct(est.change)}; {bound}; {est.method})"
        return (
            f"{what} ({fmt.signed_pct(est.change)}, 95% interval {self.interval()}, p{_eq(self.p())}; "
            f"{bound}; {est.method}){self.settle()}"
        )


@dataclass
class GateResult:
    """The gate's verdict: every change, the regressions, and what could not be compared."""

    baseline: RecordSet | None
    current: RecordSet
    bounds: GateBounds
    changes: list[Change] = field(default_factory=list)
    history: list[HistoryFinding] = field(default_factory=list)
    history_source: Path | None = None
    missing: list[RecordKey] = field(default_factory=list)
    """In the baseline, not in the current run (not run, or errored out of a pytest-benchmark file)."""
    new: list[RecordKey] = field(default_factory=list)
    """In the current run only."""
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == REGRESSION]

    @property
    def inconclusive(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == INCONCLUSIVE]

    @property
    def history_regressions(self) -> list[HistoryFinding]:
        return [h for h in self.history if h.verdict == REGRESSION]

    @property
    def compared(self) -> list[RecordKey]:
        return list(dict.fromkeys(c.key for c in self.changes))

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        failing = self.regressions or self.history_regressions
        return 1 if failing or (self.bounds.fail_inconclusive and self.inconclusive) else 0

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def _table(self) -> str:
        rows = []
        last = None
        for ch in self.changes:
            label = ch.key.label() if ch.key != last else ""
            last = ch.key
            method = ch.estimate.method if ch.estimate else ""
            rows.append(
                [
                    label,
                    ch.metric,
                    ch._value(ch.baseline),
                    ch._value(ch.current),
                    fmt.signed_pct(ch.change) if ch.change is not None else fmt.NA,
                    ch.interval(),
                    ch.p(),
                    ch.verdict,
                    # the lines above the table say why; "bound only" is what a reader scans for here
                    "bound only" if ch.estimate and not ch.estimate.tested else method,
                ]
            )
        headers = [
            "configuration",
            "metric",
            "baseline",
            "current",
            "change",
            "95% interval",
            "p",
            "verdict",
            "method",
        ]
        return tabulate(
            rows, headers=headers, tablefmt="simple", disable_numparse=True, colalign=colalign(headers)
        )

    def _catch_lines(self) -> list[str]:
        """Per configuration, the sessions a side this gate needs to catch a slowdown of twice the
        step-time bound 95% of the time, and the spread between sessions that says so."""
        rows = {c.key: c for c in self.changes if c.metric == "step time"}
        if not rows:
            return []
        slow = fmt.pct(2 * self.bounds.step_time_rise, 0)
        lines = [
            "",
            f"Sessions a side that catch a {slow} slowdown 95% of the time (to get N: {SESSIONS_OPTION}):",
        ]
        for key, c in rows.items():
            n = (
                str(c.catch)
                if c.catch is not None
                else f"more than {MOST_REPEATS}"
                if c.spread
                else "unknown"
            )
            lines.append(
                f"  {key.label()}: {n} ({c.spread or 'nothing measured the spread between sessions'})"
            )
        return lines

    def _history_lines(self) -> list[str]:
        if self.history_source is None:
            return []
        lines = [
            "",
            f"History ({self.history_source}, up to {self.bounds.history} earlier runs per configuration):",
        ]
        if not self.history:
            return [*lines, "  no earlier run of any current configuration"]
        flagged = [h for h in self.history if h.verdict in (REGRESSION, IMPROVED)]
        lines += [
            f"  {h.verdict.upper() if h.verdict == REGRESSION else h.verdict} {h.line()}" for h in flagged
        ]
        quiet = [h for h in self.history if h not in flagged]
        if quiet:
            few = sum(1 for h in quiet if h.found is None)
            lines.append(
                f"  no change past a bound in {len(quiet) - few} series"
                + (
                    f"; {few} with too few runs (need {min_history(self.bounds.alpha)} earlier)"
                    if few
                    else ""
                )
            )
        return lines

    def format(self) -> str:
        """The gate's report: sources, bounds and methods, each regression and inconclusive change
        with its numbers, a table of every metric, the history, then the verdict line."""
        if self.baseline is not None:
            lines = [f"llmbench gate: baseline {self.baseline.describe()}"]
        else:
            lines = ["llmbench gate: no baseline (history only)"]
        lines.append(f"               current  {self.current.describe()}")
        for rs in (self.baseline, self.current):
            if rs is not None and rs.note:
                lines.append(f"  {rs.source}: {rs.note}")
        lines += [self.bounds.describe(), METHODS]
        lines += [f"ERROR: {e}" for e in self.errors]
        lines += [f"WARNING: {w}" for w in self.warnings]
        if self.regressions:
            lines += ["", f"{len(self.regressions)} regression(s):"]
            lines += [f"  REGRESSION {c.line()}" for c in self.regressions]
        if self.inconclusive:
            fails = "fail the gate" if self.bounds.fail_inconclusive else "not failed"
            lines += [
                "",
                f"{len(self.inconclusive)} inconclusive change(s), the interval reaching past the bound "
                f"({fails}):",
            ]
            lines += [f"  inconclusive {c.line()}" for c in self.inconclusive]
        if self.changes:
            lines += ["", self._table(), *self._catch_lines()]
        lines += self._history_lines()
        if self.missing:
            lines += ["", f"In the baseline but not in the current run ({len(self.missing)}): not compared:"]
            lines += [f"  {k.label()}" for k in self.missing]
        if self.new:
            lines += ["", f"New in the current run ({len(self.new)}): no baseline yet:"]
            lines += [f"  {k.label()}" for k in self.new]
        if self.notes:
            lines += ["", *self.notes]
        lines += ["", self.verdict()]
        return "\n".join(lines)

    def verdict(self) -> str:
        if self.errors:
            return f"gate: ERROR ({self.errors[0]})"
        word = "FAILED" if self.exit_code else "passed"
        inconclusive = f"{len(self.inconclusive)} inconclusive"
        if self.bounds.fail_inconclusive and self.inconclusive:
            inconclusive += " (failing)"
        parts = []
        if self.baseline is not None:
            n = len(self.compared)
            if self.regressions:
                keys = len({c.key for c in self.regressions})
                parts.append(
                    f"{len(self.regressions)} regression(s) in {keys} of {n} configuration(s); {inconclusive}"
                )
            elif self.exit_code:
                parts.append(f"no regression against the baseline in {n} configuration(s); {inconclusive}")
            else:
                parts.append(f"{n} configuration(s) compared, {inconclusive}")
        if self.history_source is not None:
            keys = len({h.key for h in self.history})
            parts.append(f"history of {keys} configuration(s): {len(self.history_regressions)} regression(s)")
        return f"gate: {word}: " + "; ".join(parts)


def _eq(p: str) -> str:
    """'p=0.034', and 'p<0.001' rather than 'p=<0.001'."""
    return p if p.startswith("<") else "=" + p
