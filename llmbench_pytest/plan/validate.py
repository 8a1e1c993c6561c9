"""Predicted against measured: every saved GPU run's peak allocated beside its prediction.

A run's RunSpec is rebuilt from its result.json ("config" -> "run"), predicted as it would be
before running (predict.py), and compared with the peak allocated the run measured. Used by
tools/peak_table.py, which writes the table docs/results holds, and by the tests, which inject
mistakes into the model and see the validation fail.

Runs measured with a defect of the measuring tool are found from what their result.json files
record and counted apart (`defects`): until b49aad2 a configuration that ran on a warm rank after
a DeepSpeed ZeRO-3 configuration of the same rank group ran DeepSpeed's linear, which ZeRO-3 puts
in torch.nn.functional for the whole process and nothing put back
(docs/results/2026-11-26-h100-whole-suite).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.peak_model import PEAK_TOLERANCE
from ..config.spec import RunSpec, SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from ..analysis.peak_model import PeakPrediction

LINEAR_FIX = "b49aad2"
"""The commit from which the DeepSpeed strategy puts torch's linear back when it closes, and records
in strategy_config.replaced_for_this_run that it did."""


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    spec: RunSpec | None
    measured_gb: float
    reserved_gb: float | None
    predicted: PeakPrediction | None
    reason: str | None = None
    """Why there is no prediction (a compiled run, an old result without its RunSpec)."""
    defect: str | None = None
    """Measured with DeepSpeed's linear an earlier ZeRO-3 left in the rank: where, from the files."""
    undetermined: str | None = None
    """Whether the run was measured with the defect cannot be told from the files: why."""
    as_run: PeakPrediction | None = None
    """For a run with `defect`: the prediction with DeepSpeed's linear, as the run computed."""

    @property
    def gap(self) -> float | None:
        if self.predicted is None:
            return None
        return self.measured_gb / self.predicted.allocated_gb - 1

    @property
    def within(self) -> bool:
        return self.gap is not None and abs(self.gap) <= PEAK_TOLERANCE

    @property
    def gap_as_run(self) -> float | None:
        return None if self.as_run is None else self.measured_gb / self.as_run.allocated_gb - 1

    @property
    def clean(self) -> bool:
        """Predicted, and measured without a known defect of the measuring tool."""
        return self.predicted is not None and self.defect is None and self.undetermined is None


def spec_of(result: dict[str, Any]) -> RunSpec:
    """The RunSpec a result.json was run with (fields a newer RunSpec lacks are dropped)."""
    run = dict((result.get("config") or {}).get("run") or {})
    known = {f.name for f in dataclasses.fields(RunSpec)}
    kwargs = {k: v for k, v in run.items() if k in known}
    kwargs["model_config"] = tuple(tuple(x) for x in kwargs.get("model_config") or ())
    return RunSpec(**kwargs)


@dataclass(frozen=True, slots=True)
class _Launched:
    """Where a run was measured, as its result.json records it (timing.launch, metadata)."""

    path: str
    position: int
    fresh: bool
    started: str
    name: str
    zero3: bool
    restored: bool
    """The run's DeepSpeed replaced torch's linear and put it back when it closed (b49aad2 on)."""
    session: str
    group: str
    commit: str


def _launched(path: str, result: dict[str, Any]) -> _Launched | None:
    launch = (result.get("timing") or {}).get("launch") or {}
    if not launch.get("group") or not launch.get("group_configuration"):
        return None  # no rank group recorded: its own torchrun (before warm ranks, e0a8e48)
    meta = result.get("metadata") or {}
    name = str(result.get("strategy") or "")
    try:
        info = spec_of(result).info
        zero3 = info.family == "deepspeed" and info.zero_stage == 3
    except (SpecError, TypeError):
        zero3 = name.startswith("zero3")
    replaced = (result.get("strategy_config") or {}).get("replaced_for_this_run") or {}
    return _Launched(
        path=path,
        position=int(launch["group_configuration"]),
        fresh=launch.get("ranks") == "fresh",
        started=str(meta.get("started_at") or ""),
        name=name,
        zero3=zero3,
        restored=bool(replaced.get("restored_after")),
        session=str(meta.get("session") or ""),
        group=str(launch["group"]),
        commit=str(meta.get("git_commit") or "")[:7],
    )


def defects(results: dict[str, dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """({path: the defect it was measured with}, {path: why that cannot be told}) from what the
    result files record: a run's rank group (timing.launch.group, within its session and results
    folder), its position in the group (group_configuration, 1 = fresh ranks) and the start times
    order the configurations each group of ranks ran; a run at position k was measured with
    DeepSpeed's linear if a configuration at 1..k-1 of the same ranks was a DeepSpeed ZeRO-3 whose
    result does not record that torch's linear was put back (strategy_config.replaced_for_this_run,
    recorded from b49aad2 on). Where positions 1..k-1 are not all among `results`, and none found
    was a ZeRO-3, the run is undetermined."""
    by_group: dict[tuple[str, str, str], list[_Launched]] = defaultdict(list)
    for path, result in results.items():
        launched = _launched(path, result)
        if launched is not None:
            folder = path.rsplit("/", 2)[0]  # the results folder of the session
            by_group[(folder, launched.session, launched.group)].append(launched)
    found: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for runs in by_group.values():
        ranks: list[_Launched] = []  # the configurations the current ranks ran, in order
        for run in sorted(runs, key=lambda r: (r.started, r.position)):
            if run.fresh or run.position == 1 or not ranks or run.position <= ranks[-1].position:
                ranks = []
            earlier = list(ranks)
            ranks.append(run)
            if run.position == 1:
                continue
            left = [e for e in earlier if e.zero3 and not e.restored]
            where = f"configuration {run.position} of rank group {run.group}" + (
                f" (session {run.session}, commit {run.commit})" if run.session else f" (commit {run.commit})"
            )
            if left:
                first = left[0]
                found[run.path] = (
                    f"{where}, after {first.name} at configuration {first.position}: DeepSpeed's linear "
                    f"left in torch.nn.functional (put back from {LINEAR_FIX} on)"
                )
            elif len(earlier) < run.position - 1:
                missing = run.position - 1 - len(earlier)
                unknown[run.path] = (
                    f"{where}: {missing} earlier configuration(s) of these ranks have no result here, "
                    "so whether one was a ZeRO-3 cannot be told"
                )
    return found, unknown


def rows(
    paths: Iterable[Path],
    predict: Callable[..., PeakPrediction],
    predict_as_run: Callable[..., PeakPrediction] | None = None,
) -> list[Row]:
    """One row per finished GPU run among `paths` (result.json files). `predict_as_run`: the
    prediction with DeepSpeed's linear, for the runs measured with it (`defects`). A DeepSpeed run
    is predicted with the config it recorded (`ds_config=`, plan/predict.predict_spec's)."""
    results = {str(p): json.loads(p.read_text()) for p in sorted(paths)}
    found, unknown = defects(results)
    out = []
    for path, result in results.items():
        measured = result.get("peak_vram_gb")
        if result.get("device") != "cuda" or result.get("status") != "ok" or not measured:
            continue
        reserved = result.get("peak_reserved_gb")
        marks = {"defect": found.get(path), "undetermined": unknown.get(path)}
        try:
            spec = spec_of(result)
        except (SpecError, TypeError) as exc:
            out.append(
                Row(path, None, measured, reserved, None, f"no RunSpec in the result ({exc})", **marks)
            )
            continue
        if spec.compile:
            reason = "torch.compile: the compiled graph saves other tensors than the traced eager step"
            out.append(Row(path, spec, measured, reserved, None, reason, **marks))
            continue
        # DeepSpeed's settings as the run recorded them, not as its strategy would build them today
        ran = ((result.get("strategy_config") or {}).get("deepspeed_config")) or None
        kwargs = {"ds_config": ran} if ran else {}
        as_run = predict_as_run(spec, **kwargs) if predict_as_run is not None and marks["defect"] else None
        out.append(Row(path, spec, measured, reserved, predict(spec, **kwargs), as_run=as_run, **marks))
    return out


def summary(table: list[Row]) -> dict[str, Any]:
    predicted = [r for r in table if r.predicted is not None]
    clean = [r for r in predicted if r.clean]
    defect = [r for r in predicted if r.defect]
    ratios = [r.reserved_gb / r.measured_gb for r in table if r.reserved_gb]
    return {
        "runs": len(table),
        "predicted": len(predicted),
        "within": sum(r.within for r in predicted),
        "clean": len(clean),
        "clean_within": sum(r.within for r in clean),
        "defect": len(defect),
        "defect_within": sum(r.within for r in defect),
        "defect_within_as_run": sum(
            r.gap_as_run is not None and abs(r.gap_as_run) <= PEAK_TOLERANCE for r in defect
        ),
        "defect_as_run": sum(r.as_run is not None for r in defect),
        "undetermined": sum(r.undetermined is not None for r in predicted),
        "not_predicted": len(table) - len(predicted),
        "tolerance": PEAK_TOLERANCE,
        "reserved_over_allocated_median": statistics.median(ratios) if ratios else None,
    }


def _name(r: Row, root: Path | None) -> str:
    name = str(r.path)
    if root is not None:
        name = name.replace(str(root) + "/", "")
    return name.removesuffix("/result.json")


def _cells(r: Row, root: Path | None) -> str:
    sp = r.spec
    assert sp is not None and r.predicted is not None
    flag = "" if r.within else " **"
    return (
        f"| {_name(r, root)} | {sp.model} ({sp.workload}) | {sp.name} | {sp.world_size} | "
        f"{sp.per_device_batch} | {sp.seq_len} | {r.measured_gb:.2f} | {r.predicted.allocated_gb:.2f} | "
        f"{r.gap:+.1%}{flag} | "
        f"{(r.reserved_gb or 0):.2f} ({r.predicted.reserved_gb:.2f}) |"
    )


def markdown(table: list[Row], root: Path | None = None) -> str:
    s = summary(table)
    tol = f"+-{s['tolerance']:.0%}"
    share = s["clean_within"] / s["clean"] if s["clean"] else 0.0
    head = (
        f"Measured without a defect of the measuring tool: {s['clean_within']} of {s['clean']} GPU runs "
        f"within {tol} of the measured peak allocated ({share:.1%}). "
        f"{s['defect']} more were measured with DeepSpeed's linear, which an earlier ZeRO-3 configuration "
        f"on the same warm ranks left in torch.nn.functional, a defect of the measuring tool fixed in "
        f"{LINEAR_FIX}, listed apart: {s['defect_within']} of them within {tol} of the prediction, "
        f"{s['defect_within_as_run']} of {s['defect_as_run']} within {tol} of the prediction with "
        f"DeepSpeed's linear, as they ran."
    )
    if s["undetermined"]:
        head += (
            f" {s['undetermined']} ran on warm ranks whose earlier configurations have no result here: "
            "whether they ran after a ZeRO-3 cannot be told from the files; listed apart."
        )
    head += (
        f" {s['not_predicted']} not predicted (below). {s['runs']} GPU runs in all. Median "
        f"reserved/allocated {s['reserved_over_allocated_median']:.3f}."
    )
    columns = "| run | model | strategy | ws | batch | seq | measured GB | predicted GB | gap "
    columns += "| reserved GB (pred.) |"
    align = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    header = (columns, align)
    clean = [r for r in table if r.clean]
    lines = [head, "", "## Measured without the defect", "", *header]
    lines += [_cells(r, root) for r in clean]
    misses = [r for r in clean if not r.within]
    lines += ["", f"## Beyond {tol}, with the reason", ""]
    if not misses:
        lines.append(f"None: every run measured without the defect is within {tol}.")
    for r in misses:
        lines.append(f"- {_name(r, root)}: {r.gap:+.1%}; not explained yet")
    defect = [r for r in table if r.predicted is not None and r.defect]
    lines += [
        "",
        f"## Measured with DeepSpeed's linear left by an earlier ZeRO-3 (a defect fixed in {LINEAR_FIX})",
        "",
        "Found from the result files (plan/validate.defects): the run's rank group (timing.launch.group "
        "within its session and results folder), its place in it (group_configuration; start times order "
        "the runs), and an earlier configuration of the same ranks that was a DeepSpeed ZeRO-3 whose result "
        "does not record that torch's linear was put back (strategy_config.replaced_for_this_run, recorded "
        f'from {LINEAR_FIX} on). "as run": predicted with DeepSpeed\'s linear in the trace.',
        "",
        columns + " as run GB | gap as run | where |",
        align + "---:|---:|---|",
    ]
    for r in defect:
        as_run = (
            f" {r.as_run.allocated_gb:.2f} | {r.gap_as_run:+.1%} |"
            if r.as_run is not None and r.gap_as_run is not None
            else " | |"
        )
        lines.append(_cells(r, root) + as_run + f" {r.defect} |")
    undetermined = [r for r in table if r.predicted is not None and r.undetermined]
    if undetermined:
        lines += ["", "## Undetermined: earlier configurations of their ranks not in the files", ""]
        lines += [columns + " why |", align + "---|"]
        lines += [_cells(r, root) + f" {r.undetermined} |" for r in undetermined]
    lines += ["", "## Not predicted", ""]
    for r in table:
        if r.predicted is None:
            sp = r.spec
            what = f"{sp.model} {sp.name}, " if sp else ""
            lines.append(f"- {_name(r, root)} ({what}measured {r.measured_gb:.2f} GB): {r.reason}")
    return "\n".join(lines) + "\n"
