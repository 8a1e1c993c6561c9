"""The prior spread between sessions: how far a strategy's mean step time moved from one pytest
session to the next on a device, measured from saved results (decision_spread.json, written by
tools/session_spread.py, never by hand). The speed decision (decision.py) leans on it where a side
has one session and nothing else measured that spread.

Standard library only; the file is read once, when a decision first needs it.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRIOR_FILE = Path(__file__).with_name("decision_spread.json")
ENV = "LLMBENCH_SESSION_SPREAD"
"""A file of the same form to use instead (spreads measured on one's own machines with
tools/session_spread.py --write --out FILE)."""
PRIOR_WEIGHT = 4
"""Degrees of freedom a prior counts for at most. Its figure pools other configurations of the
strategy, whose spreads differ by a factor of two or more (tools/session_spread.py prints them), so
it stands for a handful of sessions of this configuration, not for its hundred: four sessions a side
of the configuration itself outweigh it.

A prior speaks for the models it was measured on ("shapes" in the file), not for every model of its
device: on one H200, llama-125m at batch 8 x 1024 (steps of 45 ms, host-bound) moved 9.6% between 24
sessions where llama-1b's ddp, the whole of the H200 prior, moves 0.5%; leaning on it, the gate
failed 1 of 12 identical pairs and `llmbench compare` named a winner in 7 of 24
(docs/results/2026-11-28-h200-gate-error-rates). Another model's comparison has no prior: it is
decided from its own sessions and history, or it is inconclusive."""


@dataclass(frozen=True)
class Prior:
    """One entry of decision_spread.json."""

    device: str
    workload: str
    strategy: str
    sd_log: float
    df: int
    sessions: int
    source: str
    """Where it came from, for the reader: 'zero3 on NVIDIA H100 80GB HBM3: 27 sessions in 9 groups
    (docs/results, 2026-11-28)'."""


@functools.cache
def _doc(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}  # no prior: every comparison without sessions or history of its own is untested


@functools.cache
def _models(path: Path) -> dict[str, frozenset[tuple[str, str]]] | None:
    """Per device (and "GPU"), the (workload, model) pairs its spreads were measured on; None for a
    file that does not say (one written before the shapes were recorded: no restriction)."""
    shapes = _doc(path).get("shapes")
    if shapes is None:
        return None
    return {d: frozenset((str(s[0]), str(s[1])) for s in v) for d, v in shapes.items()}


@functools.cache
def _table(path: Path = PRIOR_FILE) -> dict[tuple[str, str, str], Prior]:
    doc = _doc(path)
    sources = doc.get("sources") or []
    # the saved results' root ('docs/results'), not every folder under it, in each line
    roots = dict.fromkeys(str(Path(s).parent) if len(sources) > 1 else s for s in sources)
    where = f"{', '.join(roots)}, {doc.get('date', '')}"
    out = {}
    for e in doc.get("spreads") or []:
        what = "every strategy" if e["strategy"] == "*" else e["strategy"]
        work = "every workload" if e["workload"] == "*" else e["workload"]
        device = "every GPU measured" if e["device"] == "GPU" else e["device"]
        source = f"{what}, {work}, on {device}: {e['sessions']} sessions in {e['groups']} groups ({where})"
        name = (e["device"], e["workload"], e["strategy"])
        out[name] = Prior(*name, float(e["sd_log"]), int(e["df"]), int(e["sessions"]), source)
    return out


def prior_file() -> Path:
    """The spreads in use: $LLMBENCH_SESSION_SPREAD where set, else the measured ones shipped."""
    return Path(os.environ.get(ENV) or PRIOR_FILE)


def prior_for(
    hardware: str, workload: str, strategy: str, model: str | None = None, path: Path | None = None
) -> Prior | None:
    """The most specific measured prior: this device, workload and strategy; then (a GPU) the same
    on every GPU model measured; then every strategy of the workload, on this device and on every
    GPU; then every workload. None for a device nothing was measured on (an unknown device, or a CPU
    without CPU sessions in the data): a GPU prior says nothing of a CPU, nor the other way. None
    too for a `model` the spreads were not measured on (module docstring)."""
    path = path or prior_file()
    table = _table(path)
    devices = [hardware] if hardware == "CPU" else [hardware, "GPU"]
    measured_on = _models(path)
    if model is not None and measured_on is not None:
        if not any((workload, model) in measured_on.get(d, ()) for d in devices):
            return None
    names = [(d, w, s) for w, s in ((workload, strategy), (workload, "*"), ("*", "*")) for d in devices]
    return next((table[n] for n in names if n in table), None)
