"""The gate's look back: has a configuration's level moved over its last K saved runs?

A comparison with one baseline sees one step at a time: a slowdown of 3% a week passes a 5% bound
every week, forever. The history check takes the last K runs of each configuration on the same
hardware, appends the current run, and finds the most likely single change of level
(significance.change_point: the split with the largest t statistic, its p-value from shuffling the
runs, the single-change case of E-Divisive). It flags the configuration when that change is
significant at alpha AND the newest runs (the last three, or those after the change if fewer) are
past the bound from the level before the change. Under a slow drift the best split falls inside
the window and the newest runs sit most of the window's drift above the level before it, so a
drift is caught once it adds up to more than the bound within K runs: choose K to span the time
over which a drift of the bound is not acceptable.

Standard library, numpy through significance. Where the history comes from:

- a pytest-benchmark storage folder (.benchmarks/): every saved run NNNN_*.json, by counter;
- a results folder (every result.json under it): runs by their start time, and the repeats of one
  session (repeat index 2, 3, ... after 1) merged into one run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...analysis.significance import (
    IMPROVED,
    OK,
    REGRESSION,
    ChangePoint,
    RunSpread,
    change_point,
    run_spread,
)
from .. import fmt
from ..collect import ReportError, Run, find_result_files, load_results
from ..records import Record, RecordKey, merge_repeats, record_from_result
from ..saved_runs import records_from_saved_run, saved_runs

if TYPE_CHECKING:
    from collections.abc import Iterable

TOO_FEW = "too few runs"
METRICS = ("tokens/s", "step time", "peak memory")


@dataclass(frozen=True)
class Point:
    """One earlier run of a configuration: where it came from and its record."""

    label: str
    record: Record


@dataclass
class History:
    """Earlier runs per configuration, oldest first, from one folder."""

    source: Path
    runs: dict[RecordKey, list[Point]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """Saved runs left out, with why."""

    def series(self, key: RecordKey, hardware: str, last: int) -> list[Point]:
        """The newest `last` runs of key on that hardware (a baseline from another GPU is no history)."""
        same = [p for p in self.runs.get(key, []) if p.record.hardware == hardware and p.record.ok]
        return same[-last:]

    def step_times(self, key: RecordKey, current: Record, last: int, least: int) -> list[float]:
        """The mean step time of each of the newest `last` earlier sessions of key, oldest first,
        where there are at least `least` (the speed decision measures the spread between sessions
        from them); [] where fewer."""
        values = _values(self.series(key, current.hardware, last), current, "step time")
        return values if len(values) >= least else []

    def memory_spread(self, key: RecordKey, current: Record, last: int, least: int) -> RunSpread | None:
        """The spread of peak memory over the newest `last` earlier sessions of key (at least
        `least` of them), for the gate's one-run-a-side comparisons of memory."""
        values = _values(self.series(key, current.hardware, last), current, "peak memory")
        return run_spread(values) if len(values) >= least else None


def _from_storage(folder: Path, exclude: set[str]) -> History:
    hist = History(folder)
    for path in saved_runs(folder):
        if str(path.resolve()) in exclude:
            continue
        try:
            if _holds(json.loads(path.read_text()), exclude):
                continue  # this session's own autosave: the current run is not its own history
            rs = records_from_saved_run(path)
        except (OSError, json.JSONDecodeError, ReportError) as exc:
            hist.problems.append(f"{path}: left out of the history ({exc})")
            continue
        counter, _, rest = path.stem.partition("_")  # NNNN_<commit or name>_<date>_<time>
        label = f"{counter}_{rest.split('_')[0][:8]}" if rest else counter
        for rec in rs.records:
            hist.runs.setdefault(rec.key, []).append(Point(label, rec))
    return hist


def _holds(data: object, exclude: set[str]) -> bool:
    if not exclude or not isinstance(data, dict):
        return False
    infos = [(b.get("extra_info") or {}) for b in data.get("benchmarks") or [] if isinstance(b, dict)]
    return any(
        str(Path(str(i.get("result_json"))).resolve()) in exclude for i in infos if i.get("result_json")
    )


def _from_results(folder: Path, exclude: set[str]) -> History:
    collection = load_results(folder)
    hist = History(folder, problems=list(collection.problems))
    runs = [r for r in collection.runs if str(r.path.resolve()) not in exclude]
    runs.sort(key=lambda r: (str((r.data.get("metadata") or {}).get("started_at") or ""), r.order))
    sessions: dict[tuple[RecordKey, str], list[tuple[str, list[Record]]]] = {}
    for run in runs:
        rec = record_from_result(run.data, str(run.path))
        groups = sessions.setdefault((rec.key, rec.hardware), [])
        index = int((run.data.get("repeat") or {}).get("index") or 1)
        if index > 1 and groups:
            groups[-1][1].append(rec)  # a later repeat of the same session: one run of the history
        else:
            groups.append((_label(run), [rec]))
    for (key, _), groups in sessions.items():
        for label, recs in groups:
            hist.runs.setdefault(key, []).append(Point(label, merge_repeats(recs)[0]))
    return hist


def _label(run: Run) -> str:
    """When the run started and at which commit, else its folder's name."""
    meta = run.data.get("metadata") or {}
    parts = (str(meta.get("started_at") or "")[:16], str(meta.get("git_commit") or "")[:7])
    return " ".join(x for x in parts if x) or run.name


def load_history(path: Path | str, exclude: Iterable[Path | str] = ()) -> History:
    """Earlier runs from a pytest-benchmark storage folder or a results folder; `exclude` names
    the current run's files (result.json or saved run), which are not their own history."""
    folder = Path(path)
    if not folder.is_dir():
        raise ReportError(
            f"history {folder} is not a folder. Pass the pytest-benchmark storage (.benchmarks) or a "
            "folder of results that holds earlier runs."
        )
    skip = {str(Path(p).resolve()) for p in exclude}
    if saved_runs(folder):
        return _from_storage(folder, skip)
    if find_result_files(folder):
        return _from_results(folder, skip)
    raise ReportError(
        f"history {folder} holds neither pytest-benchmark saved runs (NNNN_*.json) nor result.json "
        "files. Keep earlier runs with --benchmark-autosave, or collect their results folders in one folder."
    )


@dataclass(frozen=True)
class HistoryFinding:
    """One metric of one configuration across its recent runs."""

    key: RecordKey
    metric: str
    labels: tuple[str, ...]
    """Where each run came from, oldest first; the last is the current run."""
    values: tuple[float, ...]
    found: ChangePoint | None
    bound: float
    verdict: str

    def _value(self, v: float) -> str:
        if self.metric == "tokens/s":
            return fmt.tokens(v)
        return fmt.seconds(v) + " s" if self.metric == "step time" else fmt.gb(v) + " GB"

    def line(self) -> str:
        what = f"{self.key.label()}: {self.metric} over {len(self.values)} runs ({self.labels[0]} .. current)"
        cp = self.found
        if cp is None:
            return f"{what}: too few runs for the change-point test"
        sign = "-" if self.metric == "tokens/s" else "+"
        return (
            f"{what}: {self._value(cp.before)} up to {self.labels[cp.split - 1]}, "
            f"{self._value(cp.newest)} in the newest {cp.newest_runs} "
            f"({fmt.signed_pct(cp.change)}; step at the split {fmt.signed_pct(cp.step)}), "
            f"permutation p={_p(cp.p_value)}; bound {sign}{fmt.pct(self.bound)}"
        )


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _metric(rec: Record, metric: str) -> float | None:
    if metric == "tokens/s":
        return rec.tokens_per_sec
    return rec.step_time if metric == "step time" else rec.peak_memory_gb


def _points(earlier: list[Point], current: Record, metric: str) -> list[tuple[str, float]]:
    """(label, value) of the earlier runs that measured the metric as the current run does."""
    pts = [(p.label, _metric(p.record, metric), p.record.memory_kind) for p in earlier]
    # host RSS against GPU memory is no series
    return [
        (lab, v) for lab, v, kind in pts if v and (metric != "peak memory" or kind == current.memory_kind)
    ]


def _values(earlier: list[Point], current: Record, metric: str) -> list[float]:
    return [v for _, v in _points(earlier, current, metric)]


def judge_history(
    key: RecordKey,
    current: Record,
    earlier: list[Point],
    bounds: dict[str, tuple[float, bool]],
    alpha: float,
    min_runs: int,
) -> list[HistoryFinding]:
    """The history verdict of each metric; `bounds` maps a metric to (bound, higher_is_worse)."""
    out = []
    for metric in METRICS:
        pts = _points(earlier, current, metric)
        now = _metric(current, metric)
        if not now:
            continue
        labels = (*(lab for lab, _ in pts), "current")
        values = (*(v for _, v in pts), now)
        bound, higher_is_worse = bounds[metric]
        if len(pts) < min_runs:
            out.append(HistoryFinding(key, metric, labels, values, None, bound, TOO_FEW))
            continue
        cp = change_point(values)
        worse = cp.change if higher_is_worse else -cp.change
        verdict = OK
        if cp.p_value < alpha and worse > bound:
            verdict = REGRESSION
        elif cp.p_value < alpha and worse < -bound:
            verdict = IMPROVED
        out.append(HistoryFinding(key, metric, labels, values, cp, bound, verdict))
    return out
