"""Reports, comparisons and the regression gate over llmbench results.

Imports the standard library and tabulate only; plots.py loads matplotlib when plots are drawn.
The `llmbench` command (cli.py) and the pytest plugin use this API:

    write_report(results_dir, out_dir=None) -> ReportFiles      summary/metrics.csv, .md, plots/
    summary_text(results_dir) -> str                             the console summary table
    load_records(path) -> RecordSet                              result.json files or pytest-benchmark JSON
    records_from_results(results) -> RecordSet                   result dicts already in memory
    resolve_saved_run(ref, storage) -> Path                      '0001' / 'latest' -> the saved run's file
    run_gate(baseline, current, GateBounds()) -> GateResult      .regressions, .inconclusive,
                                                                 .history_regressions, .format()
    gate_session(result_paths, baseline, bounds, storage)        --llmbench-gate at a session's end

Module roles: collect (read a results folder), configs (group runs), scaling, recommend,
metrics_csv, table (console), markdown, plots, build (write_report), records (plain records for
compare and gate), compare, gate, fmt (number formatting).
"""

from __future__ import annotations

from .build import Report, ReportFiles, summary_text, write_report
from .collect import ReportError
from .gate import GateBounds, GateResult, gate_session, parse_bound, run_gate
from .records import RecordSet, load_records, records_from_results, resolve_saved_run

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
