"""The regression gate: run.py compares and judges, history.py looks back over earlier runs,
result.py prints what was found, settings.py checks `--llmbench-gate`'s saved run at session start."""

from __future__ import annotations

from .result import Change, GateResult
from .run import GateBounds, gate_session, load_inputs, parse_bound, run_gate

__all__ = ["Change", "GateBounds", "GateResult", "gate_session", "load_inputs", "parse_bound", "run_gate"]
