"""The inputs of `llmbench compare`: each folder or saved run read as records, with its price.

Standard library only. One price per input, in $ per GPU-hour (the encoder-decoder benchmark's
`--cost 3.00 5.50`), or none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..collect import ReportError
from ..sources import load_records

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..records import RecordSet


@dataclass(frozen=True)
class Input:
    """One side of the comparison."""

    label: str
    """Short name shown in the tables (the folder or file name)."""
    records: RecordSet
    price: float | None = None
    """$ per GPU-hour, or None without --cost."""


def parse_prices(raw: Sequence[str] | None, labels: Sequence[str]) -> list[float | None]:
    """One $/GPU-hour per input, in order; raises ReportError on a count mismatch or a bad number."""
    if not raw:
        return [None] * len(labels)
    if len(raw) != len(labels):
        raise ReportError(
            f"--cost: {len(raw)} price(s) for {len(labels)} input(s) ({', '.join(labels)}); "
            "give one $ per GPU-hour per input, in the same order"
        )
    prices: list[float | None] = []
    for text, label in zip(raw, labels, strict=True):
        try:
            value = float(text.lstrip("$"))
        except ValueError:
            raise ReportError(f"--cost: {text!r} for {label} is not a number; write e.g. 3.00") from None
        if not math.isfinite(value) or value < 0:
            raise ReportError(f"--cost: {text!r} for {label} must be a price of 0 or more ($ per GPU-hour)")
        prices.append(value)
    return prices


def _labels(paths: Sequence[Path]) -> list[str]:
    names = [p.name or str(p) for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]  # same folder name on two machines: the full path tells them apart


def load_inputs(
    paths: Sequence[Path | str], prices: Sequence[str] | None = None, sessions: int = 1
) -> list[Input]:
    """Each input's records (a results folder: each configuration's newest `sessions` sessions)."""
    ps = [Path(p) for p in paths]
    labels = _labels(ps)
    costs = parse_prices(prices, labels)
    return [
        Input(label, load_records(p, sessions), cost)
        for p, label, cost in zip(ps, labels, costs, strict=True)
    ]
