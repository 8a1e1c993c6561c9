"""summary/plots/*.png: panels.py decides what goes in which plot, charts.py draws them."""

from __future__ import annotations

from .charts import PLOT_FILES, PlotsUnavailable, write_plots

__all__ = ["PLOT_FILES", "PlotsUnavailable", "write_plots"]
