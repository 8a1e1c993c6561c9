"""Step-time statistics. Standard library only."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepStats:
    mean: float
    median: float
    min: float
    max: float
    std: float
    """Sample standard deviation (n-1); 0 for a single step."""
    cv: float
    """Coefficient of variation, std / mean."""

    @classmethod
    def of(cls, times: list[float]) -> StepStats:
        if not times:
            nan = math.nan
            return cls(nan, nan, nan, nan, nan, nan)
        mean = statistics.fmean(times)
        std = statistics.stdev(times) if len(times) > 1 else 0.0
        return cls(
            mean=mean,
            median=statistics.median(times),
            min=min(times),
            max=max(times),
            std=std,
            cv=std / mean if mean > 0 else math.nan,
        )


def third_means(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the last third (at least one value each) of a series."""
    if not values:
        return math.nan, math.nan
    k = max(1, len(values) // 3)
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])
