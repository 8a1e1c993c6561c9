"""What rank 0 does when a session ends: the report (--llmbench-report) and the regression gate
(--llmbench-gate). pytest-benchmark's own --benchmark-compare-fail only knows time, and its
compare command cannot fail; this gate also fails on tokens/s and memory, and allows for noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from .state import LlmbenchSession


def _storage(config: pytest.Config) -> Path:
    raw = str(config.getoption("benchmark_storage", None) or "file://./.benchmarks")
    path = raw.removeprefix("file://")
    return Path(config.invocation_params.dir, path)


def write_session_report(session: LlmbenchSession) -> list[str]:
    """Lines for the terminal: the summary table and where the report went."""
    from ..report import ReportError, write_report

    try:
        files = write_report(session.results_dir, only=session.result_paths)
    except ReportError as exc:
        return [f"llmbench report: {exc}"]
    lines = [files.table, f"report: {files.markdown}", f"metrics: {files.csv}"]
    if files.plots:
        lines.append(f"plots: {files.out_dir / 'plots'} ({len(files.plots)} files)")
    lines.extend(f"warning: {w}" for w in files.warnings)
    return lines


def run_session_gate(session: LlmbenchSession, config: pytest.Config) -> tuple[int, list[str]]:
    """Gate this session's results against a saved pytest-benchmark run. Returns (exit code, lines)."""
    import json

    from ..report import (
        GateBounds,
        ReportError,
        load_records,
        parse_bound,
        records_from_results,
        resolve_saved_run,
        run_gate,
    )

    opts = session.options
    try:
        bounds_raw = opts.gate_bounds or {}
        bounds = GateBounds(
            tokens_drop=parse_bound(bounds_raw.get("tokens", "5%"), "--llmbench-gate-bounds tokens"),
            step_time_rise=parse_bound(bounds_raw.get("step_time", "5%"), "--llmbench-gate-bounds step_time"),
            memory_rise=parse_bound(bounds_raw.get("memory", "5%"), "--llmbench-gate-bounds memory"),
            noise_factor=float(bounds_raw.get("noise", "1")),
        )
        baseline_path = resolve_saved_run(str(opts.gate), _storage(config))
        baseline = load_records(baseline_path)
        results = [json.loads(Path(p).read_text()) for p in session.result_paths if Path(p).exists()]
        current = records_from_results(results)
        outcome = run_gate(baseline, current, bounds)
    except (ReportError, ValueError) as exc:
        return 2, [f"llmbench gate could not compare: {exc}"]
    return outcome.exit_code, [f"baseline: {baseline_path}", outcome.format()]
