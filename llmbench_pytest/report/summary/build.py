"""The report: load a results folder once, derive everything, write summary/.

This is the entry point for the `llmbench report` command and for the pytest plugin's session-end
report; both call write_report(). Standard library and tabulate; matplotlib only when plotting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..collect import SUMMARY_DIR, Collection, load_results
from ..configs import Config, ConfigKey, config_key, group_configs, one_session_each
from ..scaling import Scaling, scaling_table
from . import markdown, metrics_csv
from .markdown_settings import for_ranking
from .recommend import PatternRules, Recommendation, recommend
from .table import summary_table

if TYPE_CHECKING:
    from collections.abc import Iterable

REPORT_FILE = "BENCHMARK_REPORT.md"
CSV_FILE = "metrics.csv"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class Report:
    """Everything the report shows, derived once from a results folder."""

    collection: Collection
    configs: list[Config]
    scaling: dict[ConfigKey, Scaling]
    recommendations: list[Recommendation]
    rules: PatternRules

    @classmethod
    def from_dir(
        cls,
        results_dir: Path | str,
        rules: PatternRules | None = None,
        only: Iterable[Path | str] | None = None,
    ) -> Report:
        """Raises ReportError when the folder is missing or holds no readable result."""
        collection = load_results(results_dir, only)
        read = len(collection.runs)
        collection.runs, collection.left_out = one_session_each(collection.runs)
        collection.older_runs = read - len(collection.runs)
        rules = rules or PatternRules()
        configs = group_configs(collection.runs)
        scaling = scaling_table(configs)
        # each strategy ranked at the fastest of its settings measured, never at a what-if
        ranked, _ = for_ranking(configs)
        return cls(collection, configs, scaling, recommend(ranked, scaling, rules), rules)

    def table(self) -> str:
        return summary_table(self.configs, self.scaling, self.recommendations)


@dataclass
class ReportFiles:
    """What write_report wrote, and what it could not."""

    out_dir: Path
    """The summary folder."""
    csv: Path
    """summary/metrics.csv"""
    markdown: Path
    """summary/BENCHMARK_REPORT.md"""
    table: str
    """The console summary table (the same the command prints)."""
    plots: list[Path] = field(default_factory=list)
    """summary/plots/*.png; empty when plots were off or matplotlib is missing."""
    warnings: list[str] = field(default_factory=list)
    """Unreadable result files, plots not drawn (with the install hint)."""

    @property
    def paths(self) -> list[Path]:
        return [self.csv, self.markdown, *self.plots]


def write_report(
    results_dir: Path | str,
    out_dir: Path | str | None = None,
    *,
    plots: bool = True,
    rules: PatternRules | None = None,
    only: Iterable[Path | str] | None = None,
) -> ReportFiles:
    """Write metrics.csv, BENCHMARK_REPORT.md and plots/ for the results under results_dir.

    out_dir defaults to results_dir/summary; `only` limits the report to those result.json files
    (a session's own runs). Raises ReportError (collect.py) when the folder is missing or holds no
    readable result; unreadable files are left out and listed in `warnings`.
    """
    from ..plots import PlotsUnavailable, write_plots

    report = Report.from_dir(results_dir, rules, only)
    root = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else (root if root.is_dir() else root.parent) / SUMMARY_DIR
    out.mkdir(parents=True, exist_ok=True)
    warnings = [*report.collection.problems, *report.collection.left_out]

    runs = sorted(report.collection.runs, key=lambda r: (config_key(r).sort_key(), r.order))
    csv_path = metrics_csv.write(out / CSV_FILE, runs, report.scaling)

    plot_paths: list[Path] = []
    plot_note: str | None = None
    if plots:
        try:
            plot_paths, plot_note = write_plots(out / PLOTS_DIR, report.configs, report.scaling, report.rules)
        except PlotsUnavailable as exc:
            plot_note = f"Plots not drawn: {exc}."
            warnings.append(str(exc))
    else:
        plot_note = "Plots were turned off (--no-plots)."

    md_path = out / REPORT_FILE
    md_path.write_text(
        markdown.render(
            report.collection,
            report.configs,
            report.scaling,
            report.recommendations,
            plot_paths,
            plot_note,
            out,
        )
    )
    return ReportFiles(out, csv_path, md_path, report.table(), plot_paths, warnings)


def summary_text(results_dir: Path | str, only: Iterable[Path | str] | None = None) -> str:
    """The console summary table for a results folder, without writing anything."""
    return Report.from_dir(results_dir, only=only).table()
