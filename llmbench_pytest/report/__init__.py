"""Reports, comparisons and the regression gate over llmbench results.

Imports the standard library and tabulate only; plots/charts.py loads matplotlib when plots are drawn.
The `llmbench` command (cli.py) and the pytest plugin use this API:

    write_report(results_dir, out_dir=None) -> ReportFiles      summary/metrics.csv, .md, plots/
    summary_text(results_dir) -> str                             the console summary table
    load_records(path) -> RecordSet                              result.json files or pytest-benchmark JSON
    records_from_results(results) -> RecordSet                   result dicts already in memory
    resolve_saved_run(ref, storage) -> Path                      '0001' / 'latest' -> the saved run's file
    run_gate(baseline, current, GateBounds()) -> GateResult      .regressions, .inconclusive,
                                                                 .history_regressions, .format()
    gate_session(result_paths, baseline, bounds, storage)        --llmbench-gate at a session's end

Grouped by what they render: summary/ (the report a results folder gets: its console table,
metrics.csv, BENCHMARK_REPORT.md and the recommendation), plots/ (summary/plots/*.png), compare/
(`llmbench compare`) and gate/ (`llmbench gate`, --llmbench-gate). Beside them, what they share:
collect (read a results folder), configs (group runs into configurations), records (plain records
for compare and gate), scaling (series across world sizes), gpu_truth (what the GPU measurements
say), estimates and ranking (which of two results is faster, and the words for it), fmt (numbers
and column alignment).
"""

from __future__ import annotations

from .collect import ReportError
from .gate import GateBounds, GateResult, gate_session, parse_bound, run_gate
from .records import RecordSet, records_from_results
from .saved_runs import resolve_saved_run
from .sources import load_records
from .summary.build import Report, ReportFiles, summary_text, write_report

__all__ = [
    "GateBounds",
    "GateResult",
    "RecordSet",
    "Report",
    "ReportError",
    "ReportFiles",
    "gate_session",
    "load_records",
    "parse_bound",
    "records_from_results",
    "resolve_saved_run",
    "run_gate",
    "summary_text",
    "write_report",
]
