"""pytest-benchmark saved runs as llmbench records.

Standard library only. A saved run (`--benchmark-autosave` / `--benchmark-json`) holds llmbench's
numbers in `benchmarks[*].extra_info`, the measured step times in seconds in `benchmarks[*].stats`
and the GPU in `machine_info.llmbench`. A folder of those (`.benchmarks/`) means its newest saved
run, as `--benchmark-compare` does. One saved run is one pytest session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .collect import ReportError
from .records import (
    Record,
    RecordSet,
    key_of,
    mean_sd_of,
    merge_repeats,
    repeat_fields,
    samples_of,
    session_of,
)


def _benchmark_record(b: Mapping[str, Any], llm: Mapping[str, Any], source: str) -> Record:
    ei = b.get("extra_info") or {}
    stats = b.get("stats") or {}
    device = str(ei.get("device") or llm.get("device") or "unknown")
    on_cpu = device == "cpu"
    mean = stats.get("mean") or ei.get("mean_step_time_sec")
    # stats.data with --benchmark-save-data; with repeats it holds every repeat's steps
    samples = samples_of(stats.get("data")) or samples_of(ei.get("step_times_sec"))
    # the session folder its result.json was written in, else the saved run itself (one session)
    session = session_of({}, str(ei.get("result_json") or "")) or Path(source).name
    return Record(
        key=key_of({**(b.get("params") or {}), **ei}),
        status=str(ei.get("status") or "ok"),
        tokens_per_sec=ei.get("tokens_per_sec"),
        samples_per_sec=ei.get("samples_per_sec"),
        step_time=mean,
        step_time_std=stats.get("stddev"),
        peak_memory_gb=ei.get("peak_host_rss_gb") if on_cpu else ei.get("peak_vram_gb"),
        memory_kind="host RSS" if on_cpu else "GPU allocated",
        device=device,
        gpu_name=llm.get("gpu_name"),
        source=f"{source}::{b.get('name')}",
        step_samples=samples,
        session=session,
        session_ids=(session,),
        mean_sd=mean_sd_of({}, samples),
        **repeat_fields(ei.get("repeats")),
    )


def from_benchmark_json(path: Path, data: Mapping[str, Any], note: str | None = None) -> RecordSet:
    llm = (data.get("machine_info") or {}).get("llmbench") or {}
    out = RecordSet(path, "pytest-benchmark", note=note)
    records = []
    for b in data.get("benchmarks") or []:
        if not isinstance(b, Mapping) or not (b.get("extra_info") or {}).get("strategy"):
            out.problems.append(
                f"{path}: benchmark {b.get('name') if isinstance(b, Mapping) else b!r} "
                "has no llmbench extra_info; left out"
            )
            continue
        records.append(_benchmark_record(b, llm, str(path)))
    if not records:
        raise ReportError(
            f"{path}: a pytest-benchmark file with no llmbench benchmark in it "
            f"({len(data.get('benchmarks') or [])} entries). Save one with "
            "`pytest benchmarks/ --benchmark-autosave` (or --benchmark-json=FILE)."
        )
    out.records = merge_repeats(records)
    return out


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        # a .tgz of a results folder (docs/results keeps them so) or another binary file
        raise ReportError(
            f"{path}: not a JSON text file; an archive of a results folder must be unpacked first "
            "(mkdir runs && tar xf FILE -C runs), then give the folder"
        ) from None


_COUNTER = re.compile(r"^(\d+)_")  # pytest-benchmark names saved runs NNNN_<name>.json


def _counter(p: Path) -> int:
    m = _COUNTER.match(p.name)
    return int(m.group(1)) if m else -1


def saved_runs(folder: Path) -> list[Path]:
    """Every pytest-benchmark saved run under folder, oldest first (by counter, then mtime)."""
    files = [p for p in folder.rglob("*.json") if _COUNTER.match(p.name)]
    return sorted(files, key=lambda p: (_counter(p), p.stat().st_mtime, str(p)))


def records_from_saved_run(path: Path) -> RecordSet:
    """The records of one pytest-benchmark saved run (.json); ReportError when it has none."""
    return from_benchmark_json(path, read_json(path))


def newest_saved_run(folder: Path) -> tuple[Path, int] | None:
    """The newest pytest-benchmark saved run under folder (storage layout: <machine>/NNNN_*.json)."""
    files = [p for p in folder.rglob("*.json") if _COUNTER.match(p.name)]
    if not files:
        return None

    # the counter orders saved runs even where a git checkout gave every file the same mtime
    return max(files, key=lambda p: (_counter(p), p.stat().st_mtime, str(p))), len(files)


def resolve_saved_run(ref: str, storage: Path | str = ".benchmarks") -> Path:
    """A pytest-benchmark saved run named as `--benchmark-compare` names one: a path, a counter
    ('0001' or '1'), a name fragment, or 'latest'/'' (the newest in storage). Raises ReportError
    listing what storage holds when nothing or more than one file matches."""
    path = Path(ref)
    if ref and path.exists():
        return path
    root = Path(storage)
    if not root.is_dir():
        raise ReportError(
            f"no pytest-benchmark storage at {root} to find saved run {ref!r} in. Save a baseline with "
            "--benchmark-autosave, or pass the path of a saved run."
        )
    if ref in ("", "latest"):
        newest = newest_saved_run(root)
        if newest is None:
            raise ReportError(f"{root} holds no saved run (NNNN_*.json); save one with --benchmark-autosave")
        return newest[0]
    files = sorted(p for p in root.rglob("*.json") if _COUNTER.match(p.name))
    if ref.isdigit():
        hits = [p for p in files if _counter(p) == int(ref)]
    else:
        hits = [p for p in files if ref in p.name]
    if len(hits) == 1:
        return hits[0]
    names = ", ".join(p.name for p in files[-6:]) or "none"
    what = "no saved run" if not hits else f"{len(hits)} saved runs"
    raise ReportError(
        f"{what} in {root} match {ref!r} (newest there: {names}); name one by its counter or file name"
    )
