"""The report a results folder gets (summary/): build.py writes it; recommend.py chooses what to
train with; table.py prints the console table; metrics_csv.py writes metrics.csv; markdown.py and
its sections (markdown_*.py, md_table.py) write BENCHMARK_REPORT.md. The plots are in ../plots/."""

from __future__ import annotations
