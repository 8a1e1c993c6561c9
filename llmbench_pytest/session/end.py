"""What rank 0 does when a session ends: the report (--llmbench-report) and the regression gate
(--llmbench-gate). pytest-benchmark's own --benchmark-compare-fail only knows time, and its
compare command cannot fail; this gate also fails on tokens/s and memory, and only on a change
that is significant as well as beyond its bound (report/gate/run.py, the decision in analysis/decision.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from .state import LlmbenchSession


def write_session_report(session: LlmbenchSession) -> list[str]:
    """Lines for the terminal: the summary table and where the report went."""
    from ..report import ReportError, write_report

    try:
        files = write_report(session.run_dir, only=session.result_paths)
    except ReportError as exc:
        return [f"llmbench report: {exc}"]
    lines = [files.table, f"report: {files.markdown}", f"metrics: {files.csv}"]
    if files.plots:
        lines.append(f"plots: {files.out_dir / 'plots'} ({len(files.plots)} files)")
    lines.extend(f"warning: {w}" for w in files.warnings)
    return lines


def storage_path(config: pytest.Config) -> Path:
    """pytest-benchmark's storage folder (--benchmark-storage, default .benchmarks)."""
    raw = str(config.getoption("benchmark_storage", None) or "file://./.benchmarks")
    return Path(config.invocation_params.dir, raw.removeprefix("file://"))


def run_session_gate(session: LlmbenchSession, config: pytest.Config) -> tuple[int, list[str]]:
    """Gate this session's results against the saved run found at session start (and, with
    history=K in --llmbench-gate-bounds, against the last K saved runs). Returns (exit code, lines)."""
    from ..report import gate_session

    assert session.gate_baseline is not None, "the plugin resolves --llmbench-gate at session start"
    return gate_session(
        session.result_paths, session.gate_baseline, session.options.gate_bounds, storage_path(config)
    )
