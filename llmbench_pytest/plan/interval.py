"""A scale prediction's 90% interval, and the words that say what it is known to. Standard library
only; the figures come from the validation (plan/scale_calibration.py, which tools/scale_validation.py
writes), never from this file.

Work in the log of measured over predicted step time, r = ln(measured / predicted). Four parts:

- the measured inputs' own spread: each run the prediction starts from knows its mean step to its
  95% interval (result.json's step_time_mean_interval.relative, h): an SD of h / 1.96 each;
- the strategy's spread from host to host: the SD of the same configuration's measured step over
  the kept sessions on the same GPU model; where it was seen in fewer than three, the larger of its
  class's median and its own run's step CV times the kept ratio of the two (Calibration.host_cv);
- the model's validated error at that distance: the 5%, 50% and 95% points of r over the kept
  predictions of one doubling (world size 2 from 1, or 4 anchored at 2) of configurations of the
  same class (steady, loose inputs, waits for parameter gathers; `classes` in scale.py). A prediction
  d doublings past the largest measured world size takes the median d times (a bias adds up) and
  the spread sqrt(d) times (independent errors of each doubling);
- the assumptions beyond the node: the step at both ends of their ranges (plan/network.Fabric.corner),
  which bound the interval linearly (they are ranges, not distributions).

The three statistical parts are added in quadrature on each side of the median:

    low  = fast_end x exp(m d - sqrt(((m - q05) sqrt d)^2 + (1.645 s)^2))
    high = slow_end x exp(m d + sqrt(((q95 - m) sqrt d)^2 + (1.645 s)^2))

with s^2 the sum of the inputs' and the hosts' variances.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.stats import StepStats

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

Z90 = 1.6449
"""The normal's 95th percentile: a 90% two-sided interval."""
Z95 = 1.9600
"""What a run's 95% interval of its mean is in SDs."""
MIN_ERRORS = 8
"""Fewer kept errors than this in a class: the pooled errors of every class stand in."""
MIN_SESSIONS = 3
"""Sessions a configuration must have been seen in for its own host-to-host spread."""
CLASSES = ("steady", "loose", "gathers")


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


@dataclass(frozen=True)
class ModelError:
    """The model's validated error, r = ln(measured / predicted), over one doubling."""

    low: float
    mid: float
    high: float
    count: int

    @classmethod
    def of(cls, errors: Sequence[float]) -> ModelError:
        return cls(quantile(errors, 0.05), quantile(errors, 0.5), quantile(errors, 0.95), len(errors))


def log_error(predicted: float, measured: float) -> float:
    return math.log(measured / predicted)


def spread_sd(input_relatives: Sequence[float | None], host_cv: float) -> float:
    """The SD (log) of the inputs' and the hosts' parts: each 95% relative half-width / 1.96."""
    parts = [(float(h) / Z95) ** 2 for h in input_relatives if h]
    return math.sqrt(sum(parts) + host_cv**2)


def bounds(
    fast: float, slow: float, error: ModelError | None, doublings: float, sd: float
) -> tuple[float, float]:
    """(low, high) of the 90% interval of the step (module docstring), from the steps at the fast
    and slow ends of the assumptions (the point twice where none applies)."""
    d = max(0.0, doublings)
    mid, below, above = 0.0, 0.0, 0.0
    if error is not None and d > 0:
        mid = error.mid * d
        below, above = (error.mid - error.low) * math.sqrt(d), (error.high - error.mid) * math.sqrt(d)
    z = Z90 * sd
    low = mid - math.sqrt(below**2 + z**2)
    high = mid + math.sqrt(above**2 + z**2)
    return fast * math.exp(low), slow * math.exp(high)


def doublings(n: int, measured: Sequence[int]) -> float:
    """How far n lies past the largest measured world size, in doublings."""
    top = max(measured)
    return math.log2(n / top) if n > top else 0.0


@dataclass(frozen=True)
class Calibration:
    """What the validation kept (plan/scale_calibration.py's CALIBRATION)."""

    doc: dict[str, Any]

    def model_error(self, klass: str, anchored: bool) -> ModelError | None:
        """The class's errors of one doubling, from a measured larger run (anchored) or from the
        smallest alone; every class's where the class holds fewer than MIN_ERRORS; None without any."""
        kind = "anchored" if anchored else "from_smallest"
        errors = (self.doc.get("errors") or {}).get(kind) or {}
        mine = errors.get(klass) or []
        if len(mine) >= MIN_ERRORS:
            return ModelError.of(mine)
        pooled = [e for values in errors.values() for e in values]
        if len(pooled) >= MIN_ERRORS:
            return ModelError.of(pooled)
        return None if kind == "from_smallest" else self.model_error(klass, anchored=False)

    def host_cv(self, configuration: str, gpu: str | None, klass: str, own_step_cv: float = 0.0) -> float:
        """The configuration's step spread from host to host on its GPU where the kept sessions saw it
        MIN_SESSIONS times. One they saw less often, or not at all, takes its class's median, or where its
        own steps vary more, their CV times the kept ratio of host-to-host spread to a run's step CV
        (HOST_PER_STEP): a step whose length moves with the host's state from one step to the next
        moves with it from one host to the next (a host-bound encoder-decoder: 10-16% a step, 9-22%
        between hosts; llama-1b: 1% and 1-4%), which a class median of other models cannot know."""
        seen = (self.doc.get("host_cv") or {}).get(f"{configuration} | {gpu or 'cpu'}")
        if seen is not None and seen.get("sessions", 0) >= MIN_SESSIONS:
            return float(seen["cv"])
        median = float((self.doc.get("class_host_cv") or {}).get(klass) or 0.0)
        return max(median, float(self.doc.get("host_per_step") or 0.0) * own_step_cv)


def step_cv(run: Mapping[str, Any]) -> float:
    """One run's step-time CV within itself (result.json's step_cv_in_run, else from its step times)."""
    cv = run.get("step_cv_in_run")
    if cv is None:  # as results/build.py computes it
        cv = StepStats.of([float(t) for t in run.get("step_times_sec") or []]).cv
    return float(cv) if cv and math.isfinite(float(cv)) else 0.0


def host_per_step(host_cv: dict[str, dict[str, Any]], step_cvs: dict[str, list[float]]) -> float:
    """HOST_PER_STEP: the median, over configurations seen MIN_SESSIONS times, of their spread from
    host to host over the median CV of their runs' own steps."""
    ratios = [
        float(seen["cv"]) / statistics.median(cvs)
        for key, seen in host_cv.items()
        if seen.get("sessions", 0) >= MIN_SESSIONS and (cvs := [c for c in step_cvs.get(key, []) if c > 0])
    ]
    return statistics.median(ratios) if ratios else 0.0


def class_host_cv(host_cv: dict[str, dict[str, Any]], class_of: dict[str, str]) -> dict[str, float]:
    """Each class's median host-to-host spread over its configurations seen MIN_SESSIONS times."""
    by: dict[str, list[float]] = {}
    for key, seen in host_cv.items():
        if seen.get("sessions", 0) >= MIN_SESSIONS and key in class_of:
            by.setdefault(class_of[key], []).append(float(seen["cv"]))
    return {k: statistics.median(v) for k, v in by.items()}


def band_text(doc: dict[str, Any]) -> str:
    """What the intervals are known to, in words, from the validation's own figures."""
    check = doc.get("check") or {}
    if not check:
        return "no validation kept: intervals from the inputs' spread and the assumptions' ranges only"
    inside, count = check["inside"], check["predictions"]
    parts = [
        f"90% intervals checked out of sample ({check['method']}, {check['sessions']} sessions on "
        f"{check['devices']}, {doc.get('date', '')}): the measured step inside its interval for "
        f"{inside} of {count} predictions ({inside / count:.0%}), median width {check['median_width']:.1%} "
        "of the step"
    ]
    unseen = check.get("unseen_model")
    if unseen:
        parts.append(
            f"for a model those sessions never ran (each of their {unseen['models']} models checked with "
            f"the others' figures alone): inside for {unseen['inside']} of {unseen['predictions']} "
            f"({unseen['inside'] / unseen['predictions']:.0%}), median width {unseen['median_width']:.1%}"
        )
    steady = check.get("steady")
    if steady:
        parts.append(
            f"configurations whose steps repeat within {steady['repeat']:.1%} from host to host: point "
            f"within 5% for {steady['within_5']} of {steady['count']}, within 10% for {steady['within_10']}"
        )
    published = doc.get("published")
    if published:
        parts.append(
            f"beyond the node, {published['points']} published multi-node runs: inside the interval "
            f"{published['inside']}, point within 5 points of efficiency {published['within_5pt']}"
        )
    return "; ".join(parts)
