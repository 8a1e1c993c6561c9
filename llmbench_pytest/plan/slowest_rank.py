"""A step of N ranks ends when the slowest of them ends. Standard library only.

Where a rank's own steps vary (a host-bound step: launches, Python, the host's scheduler), N ranks
that meet at every step each draw a step from that distribution, and the step of all of them is
the largest draw. Its expected length is the expected maximum of N draws from the measured per-step
times of the run the prediction starts from (result.json's step_times_sec), exactly, from the
order statistics of the empirical distribution: with the m sorted times x(1) <= ... <= x(m),

    E[max of N] = sum over j of x(j) x ((j / m)^N - ((j - 1) / m)^N)

The draws are the run's steps less their slow drift: ranks on one host speed up and slow down
together with it (its clocks, its other work), so only each step's departure from the mean of the
steps around it (DRIFT_WINDOW wide) is a rank's own (`jitter`). tools/scale_validation.py prints
what the term does to each class's errors (docs/results/2026-11-28-scale-published).

One rank (N = 1) gives the mean. A run of n0 ranks measured its own slowest-of-n0 at every step
(the step time is the slowest rank's), so its times are already maxima of n0 draws, and the
slowest of N ranks is the largest of N / n0 of them: a prediction at N adds E[max of N / n0] less
the mean of those times. Past the m measured steps the maximum saturates at the largest step seen:
for N / n0 much larger than m the term is a lower bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


DRIFT_WINDOW = 5
"""The window (the step and those either side of it) whose other steps' mean is the drift there."""


def jitter(samples: Sequence[float], window: int = DRIFT_WINDOW) -> list[float]:
    """The steps with their slow drift taken out: the mean plus each step's departure from the mean
    of the steps around it (window // 2 each side: a steady ramp departs by nothing, an alternating
    step by its whole swing); the steps too near either end for a whole window are left out, and
    fewer steps than a window are taken as they are."""
    xs = [float(x) for x in samples]
    mean = sum(xs) / len(xs)
    half = window // 2
    if len(xs) < window:
        return xs
    out = []
    for i in range(half, len(xs) - half):
        around = xs[i - half : i] + xs[i + 1 : i + half + 1]
        out.append(mean + xs[i] - sum(around) / len(around))
    return out


def expected_max(samples: Sequence[float], n: int) -> float:
    """E[max of n independent draws] from the empirical distribution of `samples`."""
    xs = sorted(float(x) for x in samples)
    m = len(xs)
    if m == 0 or n < 1:
        raise ValueError(f"expected_max needs samples and n >= 1; got {m} samples, n={n}")
    return sum(x * (((j + 1) / m) ** n - (j / m) ** n) for j, x in enumerate(xs))


def wait_sec(samples: Sequence[float] | None, n: int, n0: int = 1) -> float:
    """What the slowest of n ranks adds to the mean step of a run of n0 ranks whose per-step times
    are `samples` (module docstring); 0 without samples (fewer than three) or for n <= n0."""
    if not samples or len(samples) < 3 or n <= n0:
        return 0.0
    own = jitter(samples)
    return expected_max(own, max(1, round(n / n0))) - expected_max(own, 1)
