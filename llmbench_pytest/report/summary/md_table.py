"""Markdown building blocks shared by the report's sections: a GitHub table, a capped list.

Standard library and tabulate only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabulate import tabulate

from ..fmt import colalign

if TYPE_CHECKING:
    from collections.abc import Sequence

LIST_LIMIT = 50


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return tabulate(
        rows, headers=list(headers), tablefmt="github", disable_numparse=True, colalign=colalign(headers)
    )


def capped(lines: list[str], what: str) -> list[str]:
    """At most LIST_LIMIT lines; the rest counted, since metrics.csv has every run."""
    if len(lines) <= LIST_LIMIT:
        return lines
    rest = len(lines) - LIST_LIMIT
    return [*lines[:LIST_LIMIT], f"- ... and {rest} more {what} (all of them are in metrics.csv)"]
