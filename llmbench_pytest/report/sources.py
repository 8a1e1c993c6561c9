"""What a `compare`, `gate` or history input is: a results folder, one result.json, a
pytest-benchmark saved run or its storage folder, read as a RecordSet.

Standard library only.
"""

from __future__ import annotations

from pathlib import Path

from .collect import ReportError, Run, find_result_files, judged, load_results
from .configs import ConfigKey, config_key, one_session_each, sessions_read
from .records import RecordSet, merge_repeats, record_from_result
from .saved_runs import from_benchmark_json, newest_saved_run, read_json


def newest_sessions(runs: list[Run], keep: int) -> tuple[list[Run], list[str]]:
    """The runs of each configuration's newest `keep` sessions (1: configs.one_session_each, with
    its note on the sessions left out): each session is one measurement of the speed decision."""
    if keep <= 1:
        return one_session_each(runs)
    by: dict[ConfigKey, dict[str, list[Run]]] = {}
    for run in runs:
        by.setdefault(config_key(run), {}).setdefault(run.session, []).append(run)
    kept: list[Run] = []
    notes = []
    for key, sessions in by.items():
        newest = sorted(sessions, key=lambda s: max(_started(r) for r in sessions[s]))[-keep:]
        kept += [r for s in newest for r in sessions[s]]
        if len(newest) < keep:
            notes.append(
                f"{key.strategy} ws{key.world_size} {key.model} seq{key.seq_len}: {len(newest)} session(s) "
                f"here, {keep} asked for (--sessions)"
            )
    return kept, notes


def _started(run: Run) -> str:
    return str((run.data.get("metadata") or {}).get("started_at") or "")


def _from_results_dir(path: Path, sessions: int = 1) -> RecordSet:
    collection = load_results(path)
    runs, notes = newest_sessions(collection.runs, sessions)
    records = [record_from_result(run.data, str(run.path)) for run in runs]
    read = sessions_read(runs)
    return RecordSet(
        path,
        "results",
        merge_repeats(records),
        [*collection.problems, *notes],
        note=f"read {read}" if read else None,
        commits=collection.commits,
    )


def load_records(path: Path | str, sessions: int = 1) -> RecordSet:
    """Records from a results folder (each configuration's newest `sessions` sessions), a
    result.json, a pytest-benchmark JSON file, or a pytest-benchmark storage folder (its newest
    saved run). Raises ReportError naming the fix."""
    p = Path(path)
    if not p.exists():
        raise ReportError(
            f"{p} does not exist. Pass a results folder, a result.json, or a pytest-benchmark "
            "saved run (.benchmarks/.../0001_*.json or the .benchmarks folder)."
        )
    if p.is_dir():
        if find_result_files(p):
            return _from_results_dir(p, sessions)
        newest = newest_saved_run(p)
        if newest is None:
            raise ReportError(
                f"{p} holds neither result.json files nor pytest-benchmark saved runs (NNNN_*.json). "
                "Run the benchmarks with --llmbench-results-dir or --benchmark-autosave first."
            )
        file, count = newest
        data = read_json(file)
        return from_benchmark_json(file, data, note=f"newest of {count} saved run(s) under {p}")
    data = read_json(p)
    if isinstance(data, dict) and "benchmarks" in data:
        return from_benchmark_json(p, data)
    if isinstance(data, dict) and "strategy" in data:
        return RecordSet(p, "results", [record_from_result(judged(p, data), str(p))])
    raise ReportError(
        f"{p}: neither an llmbench result.json (no 'strategy') nor a pytest-benchmark file (no 'benchmarks')"
    )
