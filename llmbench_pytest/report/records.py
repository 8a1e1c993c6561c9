"""Plain per-configuration records for `compare`, `gate` and the speed rankings.

Standard library only. A record comes from a result.json (here) or a pytest-benchmark saved run
(saved_runs.py); inputs.py reads a path as a set of them.

Repeated runs of one configuration (`-r2`, `-r3`, ...) merge into one record that keeps each
run's mean step time and peak: the gate tests with runs as the unit. A single run keeps its
per-step times (result.json `step_times_sec`; a pytest-benchmark file has them in `stats.data`
when saved with --benchmark-save-data, or in `extra_info.step_times_sec`) for the gate's block
bootstrap.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..analysis.stats import mean_interval, mean_of, relative_spread
from ..results.storage import is_session_folder
from .collect import commits_of

Z95 = 1.959964
"""A 95% interval's half-width in standard deviations (normal): turns a recorded interval into one."""


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
    settings_variant: str = ""
    """A strategy setting swept off its default (config/strategy_settings.py): its own configuration."""

    def label(self) -> str:
        ckpt = (" ckpt" if self.grad_ckpt else "") + (" compile" if self.compile else "")
        ckpt += f" lora-r{self.lora_rank}" if self.workload == "lora" else ""
        ckpt += " seq2seq" if self.workload == "seq2seq" else ""
        ckpt += f" {self.optimizer}" if self.optimizer != "adamw_torch" else ""
        ckpt += f" {self.data}" if self.data != "memory" else ""
        ckpt += f" loss-{self.fused_loss}" if self.fused_loss != "none" else ""
        ckpt += f" fp8-{self.fp8}" if self.fp8 != "none" else ""
        ckpt += f" attn-{self.attention}" if self.attention != "default" else ""
        ckpt += f" {self.settings_variant}" if self.settings_variant else ""
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
    session: str = ""
    """The pytest session that measured it (its id), '' where the source does not say; for a record
    merged from several sessions, the newest."""
    session_step_times: tuple[float, ...] = ()
    """Each session's mean step time (its runs' geometric mean), where two or more sessions were
    merged: the speed decision's unit (analysis/decision.py)."""
    session_ids: tuple[str, ...] = ()
    """Every session the record holds runs of."""
    mean_sd: float = 0.0
    """How well one session's mean step time is known from inside it: the standard deviation of its
    log (from the run's steps' 95% interval, or from its repeats); a floor for the spread between
    sessions."""
    host: str = ""
    """The host name the run recorded ('' where none)."""

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
        settings_variant=str(d.get("settings_variant") or ""),
    )


def repeat_fields(summary: Any) -> dict[str, Any]:
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
    peaks = samples_of(summary.get("peak_memory_gb"))
    return {
        "repeats": int(summary["count"]),
        "repeat_step_time_cv": std / mean,
        "repeat_step_time_mean": float(mean),
        "run_step_times": per_run,
        "run_peaks": peaks if len(peaks) > 1 else (),
    }


def samples_of(times: Any) -> tuple[float, ...]:
    """Per-step times as saved, or () where there are none (or not all of them are numbers)."""
    if not isinstance(times, list) or not all(isinstance(t, int | float) and t > 0 for t in times):
        return ()
    return tuple(float(t) for t in times)


def session_of(d: Mapping[str, Any], source: str) -> str:
    """The session id a run names: its metadata's, else its session folder's (results/<date>-<time>-<id>/)."""
    sid = (d.get("metadata") or {}).get("session")
    if sid:
        return str(sid)
    for part in reversed(Path(source).parts[:-1]):
        if is_session_folder(part):
            return part.rsplit("-", 1)[-1]
    return ""


def mean_sd_of(d: Mapping[str, Any], samples: tuple[float, ...]) -> float:
    """The standard deviation of the run's log mean step time from inside its session: its recorded
    95% interval (result.json's step_time_mean_interval), else one computed from its step times;
    where a `repeats` summary gives the spread of the session's repeats, the larger."""
    interval = d.get("step_time_mean_interval")
    relative = interval.get("relative") if isinstance(interval, Mapping) else None
    if relative is None and len(samples) > 1:
        computed = mean_interval(list(samples))
        relative = computed.relative if computed is not None else None
    own = float(relative) / Z95 if relative else 0.0
    rep = repeat_fields(d.get("repeats"))
    if rep.get("repeat_step_time_cv"):
        own = max(own, rep["repeat_step_time_cv"] / math.sqrt(rep["repeats"]))
    return own


def record_from_result(d: Mapping[str, Any], source: str) -> Record:
    """A record from a result.json document (or the dict the fixture returns)."""
    meta = d.get("metadata") or {}
    device = str(d.get("device") or meta.get("device") or "")
    if not device:
        device = "cuda" if d.get("peak_vram_gb") is not None else "unknown"
    on_cpu = device == "cpu"
    ok = d.get("status", "ok") == "ok"
    samples = samples_of(d.get("step_times_sec")) if ok else ()
    session = session_of(d, source)
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
        gpu_name=d.get("gpu_name") or meta.get("gpu_name"),
        source=source,
        step_samples=samples,
        session=session,
        session_ids=(session,),
        mean_sd=mean_sd_of(d, samples) if ok else 0.0,
        host=str(meta.get("host") or ""),
        **repeat_fields(d.get("repeats")),
    )


def _sessions(ok: list[Record]) -> tuple[tuple[float, ...], float]:
    """Each session's mean step time (geometric, over its runs), in the order the sessions came,
    and the standard deviation of a session's log mean from inside it (its runs' own intervals, or
    the spread of its repeats), as the root mean square over the sessions: the mean of k sessions
    has the average of their variances over k, so one noisy session does not stand for them all."""
    by: dict[str, list[Record]] = {}
    for r in ok:
        if r.step_time:
            by.setdefault(r.session, []).append(r)
    means, floors = [], []
    for runs in by.values():
        logs = [math.log(r.step_time or 1.0) for r in runs]
        means.append(math.exp(statistics.fmean(logs)))
        own = math.sqrt(statistics.fmean(r.mean_sd**2 for r in runs) / len(runs))
        between = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
        floors.append(max(own, between))
    return tuple(means), math.sqrt(statistics.fmean(f * f for f in floors)) if floors else 0.0


def merge_repeats(records: Iterable[Record]) -> list[Record]:
    """One record per configuration and hardware; repeats give means and their spread, and runs
    of several sessions each session's mean (the speed decision's unit)."""
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
        per_session, floor = _sessions(ok)
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
                session=ok[-1].session,
                session_step_times=per_session if len(per_session) > 1 else (),
                session_ids=tuple(dict.fromkeys(r.session for r in ok)),
                mean_sd=floor,
                host=first.host,
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
