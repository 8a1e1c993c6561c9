"""Plain per-configuration records for `compare` and `gate`, from either kind of saved run.

Standard library only. A record set comes from

- a results folder (every result.json under it) or one result.json, or
- a pytest-benchmark saved run (`--benchmark-autosave` / `--benchmark-json`): its
  `benchmarks[*].extra_info` holds llmbench's numbers, `benchmarks[*].stats` the measured step
  times in seconds, `machine_info.llmbench` the GPU. A folder of those (`.benchmarks/`) means
  its newest saved run, as `--benchmark-compare` does.

Repeated runs of one configuration (`-r2`, `-r3`, ...) merge into one record that keeps each
run's mean step time and peak: the gate tests with runs as the unit. A single run keeps its
per-step times (result.json `step_times_sec`; a pytest-benchmark file has them in `stats.data`
when saved with --benchmark-save-data, or in `extra_info.step_times_sec`) for the gate's block
bootstrap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..analysis.stats import mean_of, relative_spread
from .collect import ReportError, commits_of, find_result_files, judged, load_results
from .configs import one_session_each, sessions_read


class RecordKey(NamedTuple):
    """What makes two runs comparable across machines or commits."""

    model: str
    strategy: str
    world_size: int
    seq_len: int
    per_device_batch: int
    grad_accum: int
    dtype: str
    grad_ckpt: bool
    compile: bool = False
    workload: str = "causal_lm"
    optimizer: str = "adamw_torch"
    lora_rank: int = 0
    data: str = "memory"
    fused_loss: str = "none"
    fp8: str = "none"
    attention: str = "default"

    def label(self) -> str:
        ckpt = (" ckpt" if self.grad_ckpt else "") + (" compile" if self.compile else "")
        ckpt += f" lora-r{self.lora_rank}" if self.workload == "lora" else ""
        ckpt += " seq2seq" if self.workload == "seq2seq" else ""
        ckpt += f" {self.optimizer}" if self.optimizer != "adamw_torch" else ""
        ckpt += f" {self.data}" if self.data != "memory" else ""
        ckpt += f" loss-{self.fused_loss}" if self.fused_loss != "none" else ""
        ckpt += f" fp8-{self.fp8}" if self.fp8 != "none" else ""
        ckpt += f" attn-{self.attention}" if self.attention != "default" else ""
        return (
            f"{self.strategy} ws{self.world_size} seq{self.seq_len} {self.model} "
            f"b{self.per_device_batch}x{self.grad_accum} {self.dtype}{ckpt}"
        )


@dataclass(frozen=True)
class Record:
    """One configuration's numbers from one source (repeats merged)."""

    key: RecordKey
    status: str
    """'ok' when at least one run finished; otherwise the first run's status (oom, error, ...)."""
    tokens_per_sec: float | None
    samples_per_sec: float | None
    step_time: float | None
    """Mean step time in seconds."""
    step_time_std: float | None
    """Standard deviation of the step times within a run (seconds)."""
    peak_memory_gb: float | None
    """Peak per rank: GPU allocated, or host RSS on CPU (memory_kind says which)."""
    memory_kind: str | None
    device: str
    gpu_name: str | None
    source: str
    """Where it came from: a result.json path, or a pytest-benchmark file and test name."""
    repeats: int = 1
    """How many finished runs were merged."""
    repeat_step_time_cv: float | None = None
    """Standard deviation / mean of the repeats' mean step times (two or more repeats)."""
    repeat_memory_cv: float | None = None
    """Standard deviation / mean of the repeats' peak memory (two or more repeats)."""
    repeat_step_time_mean: float | None = None
    """Mean of the repeats' mean step times, where only a `repeats` summary gave the spread."""
    run_step_times: tuple[float, ...] = ()
    """Each finished run's mean step time, where two or more were merged (the gate's unit)."""
    run_peaks: tuple[float, ...] = ()
    """Each finished run's peak memory, where two or more were merged and all measured one."""
    step_samples: tuple[float, ...] = ()
    """The measured per-step times of a single run (seconds), where the source kept them."""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.tokens_per_sec is not None

    @property
    def step_cv_in_run(self) -> float | None:
        """The coefficient of variation of the step times within the run (not between runs)."""
        if self.step_time_std is None or not self.step_time:
            return None
        return self.step_time_std / self.step_time

    @property
    def hardware(self) -> str:
        if self.device == "cpu":
            return "CPU"
        return self.gpu_name or ("GPU" if self.device == "cuda" else "unknown device")

    @property
    def time_spread(self) -> tuple[float | None, str]:
        """The measured relative spread of step time (and tokens/s), and what it is."""
        if self.repeat_step_time_cv is not None:
            return self.repeat_step_time_cv, f"spread of {self.repeats} repeats"
        return self.step_cv_in_run, "step-time CV within the run"


@dataclass
class RecordSet:
    """The records of one input (a results folder, a result file or a pytest-benchmark run)."""

    source: Path
    kind: str
    """'results' (result.json files) or 'pytest-benchmark'."""
    records: list[Record] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Files or entries left out, with why."""
    note: str | None = None
    """How the source was resolved (which saved run of a storage folder was used)."""
    commits: list[str] = field(default_factory=list)
    """The git commits the results were measured at (result.json metadata)."""

    @property
    def hardware(self) -> list[str]:
        return sorted({r.hardware for r in self.records})

    def by_key(self) -> dict[RecordKey, Record]:
        """Records by configuration; where several machines ran one configuration, the first."""
        out: dict[RecordKey, Record] = {}
        for r in self.records:
            out.setdefault(r.key, r)
        return out

    def describe(self) -> str:
        return f"{self.source} ({', '.join(self.hardware) or 'no records'})"


def _int(x: Any, default: int = 0) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def key_of(d: Mapping[str, Any]) -> RecordKey:
    return RecordKey(
        model=str(d.get("model") or "?"),
        strategy=str(d.get("strategy") or "?"),
        world_size=_int(d.get("world_size"), 1),
        seq_len=_int(d.get("seq_len")),
        per_device_batch=_int(d.get("per_device_batch")),
        grad_accum=_int(d.get("grad_accum"), 1),
        dtype=str(d.get("dtype") or "?"),
        grad_ckpt=bool(d.get("grad_ckpt")),
        compile=bool(d.get("compile")),
        workload=str(d.get("workload") or "causal_lm"),
        optimizer=str(d.get("optimizer") or "adamw_torch"),
        lora_rank=_int(d.get("lora_rank"), 0),
        data=str(d.get("data") or "memory"),
        fused_loss=str(d.get("fused_loss") or "none"),
        fp8=str(d.get("fp8") or "none"),
        attention=str(d.get("attention") or "default"),
    )


def _repeat_fields(summary: Any) -> dict[str, Any]:
    """Repeats measured inside one run (--llmbench-repeat writes a `repeats` summary: each repeat's
    mean step time, their mean and std): the run-to-run spread without the other files."""
    if not isinstance(summary, Mapping) or (summary.get("count") or 1) < 2:
        return {}
    mean, std = summary.get("mean_step_time_sec_mean"), summary.get("mean_step_time_sec_std")
    if not mean or std is None:
        return {}
    runs = summary.get("mean_step_time_sec")
    per_run = tuple(float(x) for x in runs) if isinstance(runs, list) and len(runs) > 1 else ()
    # each repeat's peak (GPU allocated, or host RSS on CPU), where the summary keeps them
    peaks = _samples(summary.get("peak_memory_gb"))
    return {
        "repeats": int(summary["count"]),
        "repeat_step_time_cv": std / mean,
        "repeat_step_time_mean": float(mean),
        "run_step_times": per_run,
        "run_peaks": peaks if len(peaks) > 1 else (),
    }


def _samples(times: Any) -> tuple[float, ...]:
    """Per-step times as saved, or () where there are none (or not all of them are numbers)."""
    if not isinstance(times, list) or not all(isinstance(t, int | float) and t > 0 for t in times):
        return ()
    return tuple(float(t) for t in times)


def record_from_result(d: Mapping[str, Any], source: str) -> Record:
    """A record from a result.json document (or the dict the fixture returns)."""
    device = str(d.get("device") or (d.get("metadata") or {}).get("device") or "")
    if not device:
        device = "cuda" if d.get("peak_vram_gb") is not None else "unknown"
    on_cpu = device == "cpu"
    ok = d.get("status", "ok") == "ok"
    return Record(
        key=key_of(d),
        status=str(d.get("status") or "ok"),
        tokens_per_sec=d.get("tokens_per_sec") if ok else None,
        samples_per_sec=d.get("samples_per_sec") if ok else None,
        step_time=d.get("mean_step_time_sec") if ok else None,
        step_time_std=d.get("step_time_std_sec") if ok else None,
        peak_memory_gb=d.get("peak_host_rss_gb") if on_cpu else d.get("peak_vram_gb"),
        memory_kind="host RSS" if on_cpu else "GPU allocated",
        device=device,
        gpu_name=d.get("gpu_name") or (d.get("metadata") or {}).get("gpu_name"),
        source=source,
        step_samples=_samples(d.get("step_times_sec")) if ok else (),
        **_repeat_fields(d.get("repeats")),
    )


def merge_repeats(records: Iterable[Record]) -> list[Record]:
    """One record per configuration and hardware; repeats give means and their spread."""
    groups: dict[tuple[RecordKey, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r.key, r.hardware), []).append(r)
    out = []
    for group in groups.values():
        ok = [r for r in group if r.ok]
        if len(group) == 1 or not ok:
            out.append(group[0])
            continue
        # the repeats' own files are all here: their spread is recomputed from them below, and a
        # `repeats` summary one of them carries would count the same runs twice

        def mean(attr: str, rs: list[Record] = ok) -> float | None:
            return mean_of(getattr(r, attr) for r in rs)

        mems = [r.peak_memory_gb for r in ok if r.peak_memory_gb is not None]
        steps = [r.step_time for r in ok if r.step_time is not None]
        first = ok[0]
        out.append(
            Record(
                key=first.key,
                status="ok",
                tokens_per_sec=mean("tokens_per_sec"),
                samples_per_sec=mean("samples_per_sec"),
                step_time=mean("step_time"),
                step_time_std=mean("step_time_std"),
                peak_memory_gb=max(mems) if mems else None,
                memory_kind=first.memory_kind,
                device=first.device,
                gpu_name=first.gpu_name,
                source=f"{len(ok)} runs ({first.source}, ...)",
                repeats=len(ok),
                repeat_step_time_cv=relative_spread(steps),
                repeat_memory_cv=relative_spread(mems),
                run_step_times=tuple(steps) if len(steps) > 1 else (),
                # a peak missing from one run would pair the others' peaks with the wrong runs' times
                run_peaks=tuple(mems) if len(mems) == len(ok) > 1 else (),
            )
        )
    return out


def records_from_results(
    results: Iterable[Mapping[str, Any]], source: Path | str = "this session"
) -> RecordSet:
    """A record set from result documents already in memory (the pytest plugin's session)."""
    results = list(results)
    records = [record_from_result(d, str(d.get("result_json") or source)) for d in results]
    return RecordSet(Path(source), "results", merge_repeats(records), commits=commits_of(results))


def _from_results_dir(path: Path) -> RecordSet:
    collection = load_results(path)
    runs, notes = one_session_each(collection.runs)
    records = [record_from_result(run.data, str(run.path)) for run in runs]
    sessions = sessions_read(runs)
    return RecordSet(
        path,
        "results",
        merge_repeats(records),
        [*collection.problems, *notes],
        note=f"read {sessions}" if sessions else None,
        commits=collection.commits,
    )


def _benchmark_record(b: Mapping[str, Any], llm: Mapping[str, Any], source: str) -> Record:
    ei = b.get("extra_info") or {}
    stats = b.get("stats") or {}
    device = str(ei.get("device") or llm.get("device") or "unknown")
    on_cpu = device == "cpu"
    mean = stats.get("mean") or ei.get("mean_step_time_sec")
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
        # stats.data with --benchmark-save-data; with repeats it holds every repeat's steps
        step_samples=_samples(stats.get("data")) or _samples(ei.get("step_times_sec")),
        **_repeat_fields(ei.get("repeats")),
    )


def _from_benchmark_json(path: Path, data: Mapping[str, Any], note: str | None = None) -> RecordSet:
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


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


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
    return _from_benchmark_json(path, _read_json(path))


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


def load_records(path: Path | str) -> RecordSet:
    """Records from a results folder, a result.json, a pytest-benchmark JSON file, or a
    pytest-benchmark storage folder (its newest saved run). Raises ReportError naming the fix."""
    p = Path(path)
    if not p.exists():
        raise ReportError(
            f"{p} does not exist. Pass a results folder, a result.json, or a pytest-benchmark "
            "saved run (.benchmarks/.../0001_*.json or the .benchmarks folder)."
        )
    if p.is_dir():
        if find_result_files(p):
            return _from_results_dir(p)
        newest = newest_saved_run(p)
        if newest is None:
            raise ReportError(
                f"{p} holds neither result.json files nor pytest-benchmark saved runs (NNNN_*.json). "
                "Run the benchmarks with --llmbench-results-dir or --benchmark-autosave first."
            )
        file, count = newest
        data = _read_json(file)
        return _from_benchmark_json(file, data, note=f"newest of {count} saved run(s) under {p}")
    data = _read_json(p)
    if isinstance(data, dict) and "benchmarks" in data:
        return _from_benchmark_json(p, data)
    if isinstance(data, dict) and "strategy" in data:
        return RecordSet(p, "results", [record_from_result(judged(p, data), str(p))])
    raise ReportError(
        f"{p}: neither an llmbench result.json (no 'strategy') nor a pytest-benchmark file (no 'benchmarks')"
    )
