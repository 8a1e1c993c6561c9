"""What the regression gate found, and how it reads: each change with its interval and p-value,
the history's findings, the table and the verdict line. run.py computes; this module prints.

Standard library and tabulate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tabulate import tabulate

from ...analysis.significance import IMPROVED, INCONCLUSIVE, REGRESSION, STEPS, Estimate
from ...config.gate_bounds import MIN_SPREAD_RUNS, GateBounds, min_history
from .. import fmt
from ..fmt import colalign

if TYPE_CHECKING:
    from pathlib import Path

    from ..records import RecordKey, RecordSet
    from .history import HistoryFinding

MOST_REPEATS = 100
"""The most runs a side the gate suggests; a change that needs more sits on its bound."""
METHODS = (
    "methods: runs as the unit where a side has 2+ runs (t-test on the log of each run's mean); one run "
    "a side: t-test against the run-to-run spread of earlier runs (--history), else a block bootstrap "
    "of its per-step times (step-to-step noise only); one peak a side without history: bound only"
)
HISTORY_OPTION = "--history DIR"
"""How `llmbench gate` is given earlier runs; gate_session names the pytest option instead."""
STEPS_RISK = "blind to run-to-run noise (on a shared CPU, 30% of A/A comparisons were false alarms)"
"""Why a block-bootstrap comparison may not hold: docs/reports.md, "Measured: false alarms and
power" (18 of 60 on a shared 2-core VM, 0 of 165 on a GPU-bound workload)."""


def steps_cure(history_option: str = HISTORY_OPTION, history_given: bool = False) -> str:
    """What puts run-to-run noise into a one-run-a-side comparison."""
    history = (
        f"keep {MIN_SPREAD_RUNS} or more earlier runs of each configuration in the history"
        if history_given
        else f"pass {history_option}"
    )
    return f"rerun both sides with --llmbench-repeat=N (3 or more), or {history}"


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
    """Runs a side that would settle an inconclusive change, if its size and spread held."""

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
        """For an inconclusive change: how many runs a side would settle it."""
        est = self.estimate
        if self.verdict != INCONCLUSIVE or est is None:
            return ""
        if self.repeats_needed is None:
            return f"; no count of runs up to {MOST_REPEATS} a side settles it: the change sits on the bound"
        if est.kind == STEPS:
            return (
                f"; at least {self.repeats_needed} runs a side would settle it (from the noise within one "
                "run; run-to-run noise is usually larger)"
            )
        return f"; about {self.repeats_needed} runs a side would settle it (--llmbench-repeat)"

    def caveat(self, cure: str | None = None) -> str:
        """For a change judged from one run's steps a side: that it may not hold, and the cure."""
        if self.estimate is None or self.estimate.kind != STEPS:
            return ""
        return f"; judged one run a side from its steps alone, {STEPS_RISK}: {cure or steps_cure()}"

    def line(self, cure: str | None = None) -> str:
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
            f"{bound}; {est.method}){self.settle()}{self.caveat(cure)}"
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
    history_option: str = HISTORY_OPTION
    """How the reader gives the gate earlier runs, for the one-run-a-side caveat."""

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
    def steps_only(self) -> list[RecordKey]:
        """Configurations judged one run a side from their steps (the block bootstrap)."""
        return list(dict.fromkeys(c.key for c in self.changes if c.estimate and c.estimate.kind == STEPS))

    def cure(self) -> str:
        return steps_cure(self.history_option, self.history_source is not None)

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
            lines += [f"  REGRESSION {c.line(self.cure())}" for c in self.regressions]
        if self.inconclusive:
            fails = "fail the gate" if self.bounds.fail_inconclusive else "not failed"
            lines += [
                "",
                f"{len(self.inconclusive)} inconclusive change(s), the interval reaching past the bound "
                f"({fails}):",
            ]
            lines += [f"  inconclusive {c.line(self.cure())}" for c in self.inconclusive]
        if self.changes:
            lines += ["", self._table()]
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
            if self.steps_only:
                parts.append(
                    f"{len(self.steps_only)} of {n} configuration(s) judged one run a side from their steps "
                    f"alone, {STEPS_RISK}: {self.cure()}"
                )
        if self.history_source is not None:
            keys = len({h.key for h in self.history})
            parts.append(f"history of {keys} configuration(s): {len(self.history_regressions)} regression(s)")
        return f"gate: {word}: " + "; ".join(parts)


def _eq(p: str) -> str:
    """'p=0.034', and 'p<0.001' rather than 'p=<0.001'."""
    return p if p.startswith("<") else "=" + p
