"""The regression gate: did this change make training slower or hungrier, beyond the noise?

Standard library and tabulate. Baseline and current are record sets (records.py): result.json
folders or pytest-benchmark saved runs, matched per configuration (model, strategy, world size,
sequence length, batch, grad accumulation, precision, activation checkpointing).

Per configuration and metric, with the relative change c = current / baseline - 1:

    tokens/s      worse when c < -bound   (default bound 5%)
    step time     worse when c > +bound   (default 5%)
    peak memory   worse when c > +bound   (default 5%)

A worse change is a **regression** only when it is also larger than the noise band; otherwise it
is reported as **within noise** and does not fail. The noise band is `noise_factor` (default 1)
times the larger of the two sides' measured relative spreads:

- step time and tokens/s: the spread of repeated runs' mean step times (std / mean) where a side
  has two or more repeats of the configuration; otherwise that run's step-time coefficient of
  variation (std / mean of its measured steps; pytest-benchmark's stddev / mean).
- peak memory: the spread of repeats' peaks where there are repeats; otherwise 0, since a
  configuration's peak is deterministic and no spread is measured within a run.

The step-time CV is wider than the uncertainty of a mean over many steps: the rule leans towards
"within noise" on a jittery machine, which is reported in the output, never silently passed.
A configuration that finished in the baseline and ran out of memory or failed now is a regression.

Exit codes: 0 no regression, 1 regressions, 2 nothing could be compared (bad input, no common
configuration, or a baseline from another GPU model with strict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tabulate import tabulate

from . import fmt
from .collect import ReportError
from .table import colalign

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .records import Record, RecordKey, RecordSet

OK, IMPROVED, WITHIN_NOISE, REGRESSION = "ok", "improved", "within noise", "REGRESSION"
NO_MEMORY = "peak memory not measured on both sides"


def parse_bound(text: str, option: str) -> float:
    """'5%' or '0.05' -> 0.05 (as --llmbench-max-cv reads fractions). A bare number above 1 is
    refused: '5' would mean 500%."""
    raw = str(text).strip()
    pct = raw.endswith("%")
    try:
        value = float(raw.rstrip("%"))
    except ValueError:
        raise ReportError(f"{option}: {text!r} is not a number; write 5% or 0.05") from None
    if not math.isfinite(value) or value < 0:
        raise ReportError(f"{option}: {text!r} must be 0 or more; write 5% or 0.05")
    if pct:
        return value / 100
    if value > 1:
        raise ReportError(
            f"{option}: {text!r} reads as {value:.0%}; write {value:g}% for {value:g} percent, or a fraction "
            f"such as {value / 100:g}"
        )
    return value


@dataclass(frozen=True, kw_only=True)
class GateBounds:
    """How much worse a metric may get before the gate fails (fractions: 0.05 is 5%)."""

    tokens_drop: float = 0.05
    """Largest allowed fall in tokens/s."""
    step_time_rise: float = 0.05
    """Largest allowed rise in mean step time."""
    memory_rise: float = 0.05
    """Largest allowed rise in peak memory per rank."""
    noise_factor: float = 1.0
    """Multiplier on the measured spread that counts as noise; 0 fails every change past a bound."""
    strict: bool = False
    """A baseline from another GPU model (or CPU vs GPU) is an error instead of a warning."""

    def describe(self) -> str:
        noise = (
            "noise: off"
            if self.noise_factor == 0
            else f"noise: {self.noise_factor:g} x the larger measured spread (repeats, else step-time CV)"
        )
        return (
            f"bounds: tokens/s -{fmt.pct(self.tokens_drop)}, step time +{fmt.pct(self.step_time_rise)}, "
            f"peak memory +{fmt.pct(self.memory_rise)}; {noise}"
        )


@dataclass(frozen=True)
class Change:
    """One metric of one configuration, baseline against current."""

    key: RecordKey
    metric: str
    """'tokens/s', 'step time', 'peak memory' or 'status'."""
    baseline: float | str
    current: float | str
    change: float | None
    """current / baseline - 1 (None for status)."""
    bound: float | None
    noise: float | None
    """The relative spread that counts as noise, when one was measured."""
    verdict: str
    noise_source: str = ""
    """What the noise band was measured from ('step-time CV of the current run', ...)."""

    def _value(self, v: float | str) -> str:
        if isinstance(v, str):
            return v
        if self.metric == "tokens/s":
            return fmt.tokens(v)
        if self.metric == "step time":
            return fmt.seconds(v) + " s"
        return fmt.gb(v) + " GB"

    def line(self) -> str:
        what = (
            f"{self.key.label()}: {self.metric} {self._value(self.baseline)} -> {self._value(self.current)}"
        )
        if self.change is None:
            return what
        sign = "-" if self.metric == "tokens/s" else "+"
        noise = (
            f", noise ±{fmt.pct(self.noise)} from the {self.noise_source}"
            if self.noise is not None
            else ", no spread measured"
        )
        return f"{what} ({fmt.signed_pct(self.change)}; bound {sign}{fmt.pct(self.bound)}{noise})"


def _judge(
    key: RecordKey,
    metric: str,
    base: float,
    cur: float,
    bound: float,
    higher_is_worse: bool,
    noise: tuple[float, str] | None,
    factor: float,
) -> Change:
    change = cur / base - 1
    worse = change if higher_is_worse else -change
    band = noise[0] * factor if noise is not None else None
    if worse > bound:
        verdict = WITHIN_NOISE if band is not None and worse <= band else REGRESSION
    elif -worse > bound:
        verdict = IMPROVED
    else:
        verdict = OK
    return Change(key, metric, base, cur, change, bound, band, verdict, noise[1] if noise else "")


def _spread(
    baseline: tuple[float | None, str], current: tuple[float | None, str]
) -> tuple[float, str] | None:
    """The larger measured spread of the two sides, and where it comes from."""
    sides = [
        (v, f"{what} of the {side}") for (v, what), side in ((baseline, "baseline"), (current, "current run"))
    ]
    measured = [(v, what) for v, what in sides if v is not None]
    return max(measured) if measured else None


def compare_records(
    key: RecordKey, b: Record, c: Record, bounds: GateBounds
) -> tuple[list[Change], list[str]]:
    """The changes of one configuration, and notes on what could not be compared."""
    if b.ok and not c.ok:
        return [Change(key, "status", "ok", c.status, None, None, None, REGRESSION)], []
    if not b.ok:
        return [], [f"{key.label()}: baseline status {b.status}, nothing to compare against"]
    out: list[Change] = []
    notes: list[str] = []
    time_noise = _spread(b.time_spread, c.time_spread)
    f = bounds.noise_factor
    if b.tokens_per_sec and c.tokens_per_sec:
        out.append(
            _judge(
                key, "tokens/s", b.tokens_per_sec, c.tokens_per_sec, bounds.tokens_drop, False, time_noise, f
            )
        )
    if b.step_time and c.step_time:
        out.append(
            _judge(key, "step time", b.step_time, c.step_time, bounds.step_time_rise, True, time_noise, f)
        )
    if b.peak_memory_gb and c.peak_memory_gb:
        if b.memory_kind != c.memory_kind:
            notes.append(f"{key.label()}: peak memory not compared ({b.memory_kind} vs {c.memory_kind})")
        else:
            mem_noise = _spread(
                (b.repeat_memory_cv, f"peak spread of {b.repeats} repeats"),
                (c.repeat_memory_cv, f"peak spread of {c.repeats} repeats"),
            )
            out.append(
                _judge(
                    key,
                    "peak memory",
                    b.peak_memory_gb,
                    c.peak_memory_gb,
                    bounds.memory_rise,
                    True,
                    mem_noise,
                    f,
                )
            )
    else:
        notes.append(NO_MEMORY)
    return out, notes


@dataclass
class GateResult:
    """The gate's verdict: every change, the regressions, and what could not be compared."""

    baseline: RecordSet
    current: RecordSet
    bounds: GateBounds
    changes: list[Change] = field(default_factory=list)
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
    def within_noise(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == WITHIN_NOISE]

    @property
    def compared(self) -> list[RecordKey]:
        return list(dict.fromkeys(c.key for c in self.changes))

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.regressions else 0

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def _table(self) -> str:
        rows = []
        by_key: dict[RecordKey, dict[str, Change]] = {}
        for ch in self.changes:
            by_key.setdefault(ch.key, {})[ch.metric] = ch
        for key, metrics in by_key.items():

            def cell(metric: str, m: dict[str, Change] = metrics) -> str:
                ch = m.get(metric)
                if ch is None:
                    return fmt.NA
                mark = {REGRESSION: " !", WITHIN_NOISE: " ~"}.get(ch.verdict, "")
                return (fmt.signed_pct(ch.change) if ch.change is not None else str(ch.current)) + mark

            worst = next(
                (
                    v
                    for v in (REGRESSION, WITHIN_NOISE, IMPROVED)
                    if any(c.verdict == v for c in metrics.values())
                ),
                OK,
            )
            rows.append(
                [key.label(), cell("tokens/s"), cell("step time"), cell("peak memory"), cell("status"), worst]
            )
        headers = ["configuration", "tokens/s", "step time", "peak memory", "status", "verdict"]
        if not any(ch.metric == "status" for ch in self.changes):
            # the status column only has something to say when a run stopped finishing
            headers.pop(4)
            rows = [r[:4] + r[5:] for r in rows]
        return tabulate(
            rows, headers=headers, tablefmt="simple", disable_numparse=True, colalign=colalign(headers)
        )

    def format(self) -> str:
        """The gate's report: sources, bounds, each regression and each within-noise change with the
        numbers, a table of every configuration, then the verdict line."""
        lines = [
            f"llmbench gate: baseline {self.baseline.describe()}",
            f"               current  {self.current.describe()}",
        ]
        for rs in (self.baseline, self.current):
            if rs.note:
                lines.append(f"  {rs.source}: {rs.note}")
        lines.append(self.bounds.describe())
        lines += [f"ERROR: {e}" for e in self.errors]
        lines += [f"WARNING: {w}" for w in self.warnings]
        if self.regressions:
            lines += ["", f"{len(self.regressions)} regression(s):"]
            lines += [f"  REGRESSION {c.line()}" for c in self.regressions]
        if self.within_noise:
            lines += [
                "",
                f"{len(self.within_noise)} change(s) past a bound but within the measured noise "
                "(not failed):",
            ]
            lines += [f"  within noise {c.line()}" for c in self.within_noise]
        if self.changes:
            lines += ["", self._table(), "(! regression, ~ within noise)"]
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
        n = len(self.compared)
        if self.errors:
            return f"gate: ERROR ({self.errors[0]})"
        if self.regressions:
            keys = len({c.key for c in self.regressions})
            return (
                f"gate: FAILED: {len(self.regressions)} regression(s) in {keys} of {n} configuration(s); "
                f"{len(self.within_noise)} change(s) within noise"
            )
        return f"gate: passed: {n} configuration(s) compared, {len(self.within_noise)} change(s) within noise"


def _hardware_warning(baseline: RecordSet, current: RecordSet) -> str | None:
    b, c = baseline.hardware, current.hardware
    if set(b) == set(c):
        return None
    return (
        f"the baseline was measured on {', '.join(b)} and the current run on {', '.join(c)}: the difference "
        "mixes hardware with the change. Refresh the baseline on this GPU model (docs/reports.md), or "
        "pass --strict to make this an error."
    )


def run_gate(baseline: RecordSet, current: RecordSet, bounds: GateBounds | None = None) -> GateResult:
    """Compare current against baseline per configuration; see the module docstring for the rules."""
    bounds = bounds or GateBounds()
    result = GateResult(baseline, current, bounds)
    result.warnings += baseline.problems + current.problems
    for name, rs in (("baseline", baseline), ("current run", current)):
        if len(rs.commits) > 1:
            result.warnings.append(
                f"the {name} ({rs.source}) holds results of {len(rs.commits)} commits "
                f"({', '.join(rs.commits[:4])}); runs of one configuration are averaged across them. "
                "Gate a fresh results folder."
            )
    mismatch = _hardware_warning(baseline, current)
    if mismatch:
        if bounds.strict:
            result.errors.append(mismatch.replace(", or pass --strict to make this an error", ""))
            return result
        result.warnings.append(mismatch)
    b_map, c_map = baseline.by_key(), current.by_key()
    common = [k for k in b_map if k in c_map]
    result.missing = [k for k in b_map if k not in c_map]
    result.new = [k for k in c_map if k not in b_map]
    if not common:
        result.errors.append(
            "no configuration in common: the baseline has "
            + _keys(list(b_map))
            + ", the current run has "
            + _keys(list(c_map))
            + ". Run the same strategies, world sizes and sequence lengths, or pick the matching baseline."
        )
        return result
    no_memory = 0
    for key in common:
        changes, notes = compare_records(key, b_map[key], c_map[key], bounds)
        result.changes += changes
        no_memory += notes.count(NO_MEMORY)
        result.notes += [n for n in notes if n != NO_MEMORY]
    if no_memory:
        # pytest-benchmark files of CPU runs carry no host RSS; one line, not one per configuration
        result.notes.append(f"{NO_MEMORY} for {no_memory} configuration(s); peak memory not compared there.")
    return result


def _keys(keys: Sequence[RecordKey], limit: int = 4) -> str:
    if not keys:
        return "none"
    shown = "; ".join(k.label() for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
