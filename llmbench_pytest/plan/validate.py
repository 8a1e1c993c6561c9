"""Predicted against measured: every saved GPU run's peak allocated beside its prediction.

A run's RunSpec is rebuilt from its result.json ("config" -> "run"), predicted as it would be
before running (predict.py), and compared with the peak allocated the run measured. Used by
tools/peak_table.py, which writes the table docs/results holds, and by the tests, which inject
mistakes into the model and see the validation fail.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.peak_model import PEAK_TOLERANCE
from ..config.spec import RunSpec, SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from ..analysis.peak_model import PeakPrediction


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    spec: RunSpec | None
    measured_gb: float
    reserved_gb: float | None
    predicted: PeakPrediction | None
    reason: str | None = None
    """Why there is no prediction (a compiled run, an old result without its RunSpec)."""

    @property
    def gap(self) -> float | None:
        if self.predicted is None:
            return None
        return self.measured_gb / self.predicted.allocated_gb - 1

    @property
    def within(self) -> bool:
        return self.gap is not None and abs(self.gap) <= PEAK_TOLERANCE


def spec_of(result: dict[str, Any]) -> RunSpec:
    """The RunSpec a result.json was run with (fields a newer RunSpec lacks are dropped)."""
    run = dict((result.get("config") or {}).get("run") or {})
    known = {f.name for f in dataclasses.fields(RunSpec)}
    kwargs = {k: v for k, v in run.items() if k in known}
    kwargs["model_config"] = tuple(tuple(x) for x in kwargs.get("model_config") or ())
    return RunSpec(**kwargs)


def rows(paths: Iterable[Path], predict: Callable[[RunSpec], PeakPrediction]) -> list[Row]:
    """One row per finished GPU run among `paths` (result.json files)."""
    out = []
    for path in sorted(paths):
        result = json.loads(path.read_text())
        measured = result.get("peak_vram_gb")
        if result.get("device") != "cuda" or result.get("status") != "ok" or not measured:
            continue
        reserved = result.get("peak_reserved_gb")
        try:
            spec = spec_of(result)
        except (SpecError, TypeError) as exc:
            out.append(Row(str(path), None, measured, reserved, None, f"no RunSpec in the result ({exc})"))
            continue
        if spec.compile:
            reason = "torch.compile: the compiled graph saves other tensors than the traced eager step"
            out.append(Row(str(path), spec, measured, reserved, None, reason))
            continue
        out.append(Row(str(path), spec, measured, reserved, predict(spec)))
    return out


def summary(table: list[Row]) -> dict[str, Any]:
    predicted = [r for r in table if r.predicted is not None]
    ratios = [r.reserved_gb / r.measured_gb for r in table if r.reserved_gb]
    return {
        "runs": len(table),
        "predicted": len(predicted),
        "within": sum(r.within for r in predicted),
        "tolerance": PEAK_TOLERANCE,
        "reserved_over_allocated_median": statistics.median(ratios) if ratios else None,
    }


def markdown(table: list[Row], root: Path | None = None) -> str:
    s = summary(table)
    lines = [
        f"{s['within']} of {s['runs']} GPU runs ({s['within']} of {s['predicted']} predicted) within "
        f"+-{s['tolerance']:.0%} of the measured peak allocated. Median reserved/allocated "
        f"{s['reserved_over_allocated_median']:.3f}.",
        "",
        "| run | model | strategy | ws | batch | seq | measured GB | predicted GB | gap "
        "| reserved GB (pred.) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        name = str(r.path)
        if root is not None:
            name = name.replace(str(root) + "/", "")
        name = name.removesuffix("/result.json")
        if r.spec is None or r.predicted is None:
            what = f"not predicted: {r.reason}"
            spec = r.spec
            lines.append(
                f"| {name} | {spec.model if spec else ''} | {spec.name if spec else ''} | | | | "
                f"{r.measured_gb:.2f} | {what} | | |"
            )
            continue
        sp = r.spec
        flag = "" if r.within else " **"
        lines.append(
            f"| {name} | {sp.model} ({sp.workload}) | {sp.name} | {sp.world_size} | {sp.per_device_batch} | "
            f"{sp.seq_len} | {r.measured_gb:.2f} | {r.predicted.allocated_gb:.2f} | {r.gap:+.1%}{flag} | "
            f"{(r.reserved_gb or 0):.2f} ({r.predicted.reserved_gb:.2f}) |"
        )
    return "\n".join(lines) + "\n"
