"""The regression gate: did this change make training slower or hungrier, and how sure is that?

Baseline and current are record sets (records.py): result.json folders or pytest-benchmark saved
runs, matched per configuration (model, strategy, world size, sequence length, batch, grad
accumulation, precision, activation checkpointing, ...). Per configuration and metric the gate
prints the relative change c = current / baseline - 1 with its 95% interval and a p-value
(analysis/significance.py says how, by what each side has: runs as the unit where a side has two
or more; with one run a side, the run-to-run spread of the history where one is given, else a
block bootstrap of the per-step times; the bound alone with one number a side), then a verdict
against the bound:

    tokens/s      worse when c < -bound   (default bound 5%)
    step time     worse when c > +bound   (default 5%)
    peak memory   worse when c > +bound   (default 5%)

REGRESSION: significant at alpha (default 0.01) AND the change past the bound; improved: the same
the other way; inconclusive: the interval reaches past the bound without that, printed with how
many runs a side would settle it (fails the gate only with fail_inconclusive). A
configuration that finished in the baseline and ran out of memory or failed now is a regression.
A verdict from one run a side's steps alone (the block bootstrap) is blind to run-to-run noise
and flagged 30% of A/A comparisons on a shared CPU: its line and the verdict line say so, and name
the cure (repeats on both sides, or a history).
With a history (history.py), each configuration's last K runs are searched for a change of
level, which catches a slow drift that no single comparison does.

Exit codes: 0 no regression, 1 regressions (or inconclusive with fail_inconclusive), 2 nothing
could be compared (bad input, no common configuration, or a baseline from another GPU model with
strict).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...analysis.significance import IMPROVED, INCONCLUSIVE, OK, REGRESSION
from ...config.gate_bounds import (
    DEFAULT_HISTORY,
    MIN_SPREAD_RUNS,
    GateBounds,
    min_history,
    parse_bound,
    parse_gate_bounds,
)
from ...results.schema import current_fields
from ..collect import ReportError, find_result_files
from ..records import RecordKey, RecordSet, records_from_results
from ..sources import load_records
from .history import History, judge_history, load_history
from .judge import NO_MEMORY, compare_records
from .result import Change, GateResult

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "IMPROVED",
    "INCONCLUSIVE",
    "OK",
    "REGRESSION",
    "Change",
    "GateBounds",
    "GateResult",
    "gate_session",
    "parse_bound",
    "parse_gate_bounds",
    "run_gate",
]


def _devices(rs: RecordSet) -> str:
    return ", ".join(rs.hardware) or "no device"


def _hardware_warning(baseline: RecordSet, current: RecordSet) -> str | None:
    """Where the baseline ran on another device (CPU against a GPU) or GPU model: named before any
    figure, since every difference then mixes hardware with the change."""
    b, c = baseline.hardware, current.hardware
    if set(b) == set(c):
        return None
    kind = "device" if ("CPU" in b) != ("CPU" in c) else "GPU model"
    return (
        f"the baseline ran on another {kind}: {_devices(baseline)}, the current run on {_devices(current)}; "
        "every difference below mixes hardware with the change. Save a baseline on this hardware "
        "(docs/gate.md), or pass --strict to make this an error."
    )


def _same_run(baseline: RecordSet, current: RecordSet) -> str | None:
    """A baseline holding runs of the current run's own session (the newest saved run after this
    session's --benchmark-autosave, or the same folder twice) compares the run with itself."""
    ids = {i for r in baseline.records for i in r.session_ids if i}
    shared = sorted(ids & {i for r in current.records for i in r.session_ids if i})
    same = baseline.source.exists() and current.source.exists() and baseline.source.samefile(current.source)
    if not shared and not same:
        return None
    which = f"session {', '.join(shared[:3])}" if shared else str(current.source)
    return (
        f"the baseline {baseline.source} is the current run itself ({which}): a run gated against itself "
        "passes whatever it measured. Name a saved run of an earlier session (--baseline "
        ".benchmarks/<machine>/NNNN_*.json, or its counter with --llmbench-gate=NNNN)."
    )


def _check_sources(result: GateResult, baseline: RecordSet | None, current: RecordSet) -> None:
    sources = (
        [("current run", current)] if baseline is None else [("baseline", baseline), ("current run", current)]
    )
    for name, rs in sources:
        result.warnings += rs.problems
        if len(rs.commits) > 1:
            result.warnings.append(
                f"the {name} ({rs.source}) holds results of {len(rs.commits)} commits "
                f"({', '.join(rs.commits[:4])}); runs of one configuration are averaged across them. "
                "Gate a fresh results folder."
            )


def _compare(
    result: GateResult, baseline: RecordSet, current: RecordSet, bounds: GateBounds, history: History | None
) -> None:
    itself = _same_run(baseline, current)
    if itself:
        result.errors.append(itself)
        return
    mismatch = _hardware_warning(baseline, current)
    if mismatch:
        if bounds.strict:
            result.errors.append(mismatch.replace(", or pass --strict to make this an error", ""))
            return
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
        return
    no_memory = 0
    for key in common:
        times: list[float] = []
        memory = None
        if history is not None:
            times = history.step_times(key, c_map[key], bounds.history, MIN_SPREAD_RUNS)
            memory = history.memory_spread(key, c_map[key], bounds.history, MIN_SPREAD_RUNS)
        changes, notes = compare_records(key, b_map[key], c_map[key], bounds, times, memory)
        result.changes += changes
        no_memory += notes.count(NO_MEMORY)
        result.notes += [n for n in notes if n != NO_MEMORY]
    if no_memory:
        # pytest-benchmark files of CPU runs carry no host RSS; one line, not one per configuration
        result.notes.append(f"{NO_MEMORY} for {no_memory} configuration(s); peak memory not compared there.")


def _look_back(result: GateResult, current: RecordSet, history: History, bounds: GateBounds) -> None:
    result.history_source = history.source
    result.warnings += history.problems
    limits = {
        "tokens/s": (bounds.tokens_drop, False),
        "step time": (bounds.step_time_rise, True),
        "peak memory": (bounds.memory_rise, True),
    }
    for key, rec in current.by_key().items():
        earlier = history.series(key, rec.hardware, bounds.history)
        if rec.ok and earlier:
            result.history += judge_history(
                key, rec, earlier, limits, bounds.alpha, min_history(bounds.alpha)
            )


def run_gate(
    baseline: RecordSet | None,
    current: RecordSet,
    bounds: GateBounds | None = None,
    history: History | None = None,
) -> GateResult:
    """Compare current against baseline per configuration, and against its history when given;
    the module docstring has the rules."""
    bounds = bounds or GateBounds()
    if history is not None and not bounds.history:
        bounds = replace(bounds, history=DEFAULT_HISTORY)
    result = GateResult(baseline, current, bounds)
    _check_sources(result, baseline, current)
    if baseline is None and history is None:
        result.errors.append("nothing to compare with: pass a baseline, a history, or both")
        return result
    if baseline is not None:
        _compare(result, baseline, current, bounds, history)
        if result.errors:
            return result
    if history is not None:
        _look_back(result, current, history, bounds)
    return result


def gate_session(
    result_paths: Sequence[Path | str],
    baseline: Path | str,
    bounds: GateBounds | None,
    storage: Path | str,
) -> tuple[int, list[str]]:
    """--llmbench-gate: this session's results against a saved run (already resolved at session
    start by gate/settings.check_gate_baseline), and, with bounds.history, against the last saved
    runs in the pytest-benchmark storage. Returns (exit code, lines for the terminal summary)."""
    bounds = bounds or GateBounds()
    try:
        results = [current_fields(json.loads(Path(p).read_text())) for p in result_paths if Path(p).exists()]
        current = records_from_results(results)
        history = None
        if bounds.history:
            history = load_history(storage, exclude=result_paths)
        outcome = run_gate(load_records(baseline), current, bounds, history)
    except (ReportError, ValueError) as exc:
        return 2, [f"llmbench gate could not compare: {exc}"]
    return outcome.exit_code, [f"baseline: {baseline}", outcome.format()]


def _keys(keys: Sequence[RecordKey], limit: int = 4) -> str:
    if not keys:
        return "none"
    shown = "; ".join(k.label() for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def load_inputs(
    baseline: str | None, current: str, history: str | None, sessions: int = 1
) -> tuple[RecordSet | None, RecordSet, History | None]:
    """The CLI's three inputs (results folders: each configuration's newest `sessions` sessions); a
    current run inside the history folder is not its own history."""
    cur = load_records(current, sessions)
    base = load_records(baseline, sessions) if baseline else None
    hist = None
    if history:
        own: Iterable[Path] = [cur.source] if cur.source.is_file() else find_result_files(cur.source)
        hist = load_history(history, exclude=own)
    return base, cur, hist
