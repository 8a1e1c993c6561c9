"""What the regression gate is asked to do: its bounds and significance level, parsed once.

Standard library only. `llmbench gate` builds GateBounds from its options; inside pytest,
`--llmbench-gate-bounds=tokens=3%,step_time=5%,memory=10%,alpha=0.01,history=20` is parsed here
when the options are, at session start, so a typo costs a second, not a training session. Each
error is a SpecError with one line: the setting, the value, the fix (the option parser puts the
option's name in front). The statistics that use these live in analysis/decision.py (speed),
analysis/significance.py (memory, the history) and report/gate/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .spec import SpecError

DEFAULT_HISTORY = 20
"""Earlier runs per configuration `llmbench gate --history` looks at unless told otherwise."""
MIN_SPREAD_RUNS = 5
"""Earlier sessions of a configuration from which a history measures the spread between sessions
(analysis/decision.py); with fewer, the prior measured for the strategy stands in."""


def min_history(alpha: float) -> int:
    """The fewest earlier runs with which the history's change-point test can reach p < alpha.

    Its statistic depends only on which runs fall before the split, so the k! (n - k)! orders that
    keep those sets tie with the observed one, and so does the mirror split: the smallest p-value
    of n runs is 2 / C(n, n // 2). At alpha 0.01 that takes 10 runs: 9 earlier and the current."""
    n = 4
    while 2 / math.comb(n, n // 2) >= alpha:
        n += 1
    return n - 1


def parse_bound(text: str, option: str) -> float:
    """'5%' or '0.05' -> 0.05 (as --llmbench-max-cv reads fractions). A bare number above 1 is
    refused: '5' would mean 500%."""
    raw = str(text).strip()
    pct = raw.endswith("%")
    try:
        value = float(raw.rstrip("%"))
    except ValueError:
        raise SpecError(f"{option}: {text!r} is not a number; write 5% or 0.05") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"{option}: {text!r} must be 0 or more; write 5% or 0.05")
    if pct:
        return value / 100
    if value > 1:
        raise SpecError(
            f"{option}: {text!r} reads as {value:.0%}; write {value:g}% for {value:g} percent, or a fraction "
            f"such as {value / 100:g}"
        )
    return value


def parse_alpha(text: str, option: str) -> float:
    """A significance level: 0.01, or 1%."""
    raw = str(text).strip()
    try:
        value = float(raw.rstrip("%")) / (100 if raw.endswith("%") else 1)
    except ValueError:
        raise SpecError(
            f"{option}: {text!r} is not a number; write a significance level such as 0.01"
        ) from None
    if not 0 < value <= 0.5:
        raise SpecError(
            f"{option}: {text!r} must be above 0 and at most 0.5; write a significance level such as 0.01 "
            "(the false-alarm rate the gate accepts)"
        )
    return value


def parse_history(text: str, option: str, alpha: float = 0.01) -> int:
    """How many earlier runs of each configuration the history check looks at (0: none)."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise SpecError(f"{option}: {text!r} is not a whole number; write 20, or 0 for no history") from None
    least = min_history(alpha)
    if value < 0 or 0 < value < least:
        raise SpecError(
            f"{option}: {value} earlier runs are too few for the change-point test at alpha {alpha:g} (it "
            f"needs {least} or more); write {least} or more, or 0 for no history"
        )
    return value


@dataclass(frozen=True, kw_only=True)
class GateBounds:
    """How much worse a metric may get, and how sure the gate must be, before it fails."""

    tokens_drop: float = 0.05
    """Largest allowed fall in tokens/s (a fraction: 0.05 is 5%)."""
    step_time_rise: float = 0.05
    """Largest allowed rise in mean step time."""
    memory_rise: float = 0.05
    """Largest allowed rise in peak memory per rank."""
    alpha: float = 0.01
    """Significance level: a change past a bound is a regression only if its p-value is below."""
    fail_inconclusive: bool = False
    """An interval that reaches past a bound without a verdict fails the gate (exit 1) too."""
    history: int = 0
    """Earlier saved runs of each configuration the history check looks at (0: no history check)."""
    strict: bool = False
    """A baseline from another GPU model (or CPU vs GPU) is an error instead of a warning."""

    def describe(self) -> str:
        inconclusive = "fail the gate" if self.fail_inconclusive else "reported, not failed"
        return (
            f"bounds: tokens/s -{self.tokens_drop:.1%}, step time +{self.step_time_rise:.1%}, "
            f"peak memory +{self.memory_rise:.1%}; a regression must also be significant at "
            f"alpha {self.alpha:g} (95% intervals); inconclusive changes {inconclusive}"
        )


_NAMES = ("tokens", "step_time", "memory", "alpha", "history", "inconclusive")


def parse_gate_bounds(raw: object) -> GateBounds:
    """'tokens=3%,step_time=5%,memory=10%,alpha=0.01,history=20,inconclusive=fail' -> GateBounds.
    Names left out keep their defaults. Raises SpecError naming the item and the fix."""
    values: dict[str, object] = {}
    history: str | None = None
    for item in str(raw).replace(" ", "").split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if key == "noise":
            raise SpecError(
                f"{item}: the noise allowance gave way to a significance test; drop noise= and set "
                "alpha= instead (default alpha=0.01: at most 1% false alarms)"
            )
        if not sep or key not in _NAMES or not value:
            raise SpecError(
                "expected name=value pairs such as tokens=5%,step_time=5%,memory=5%,alpha=0.01 "
                f"(names: {', '.join(sorted(_NAMES))}); got {item!r}"
            )
        if key == "tokens":
            values["tokens_drop"] = parse_bound(value, key)
        elif key == "step_time":
            values["step_time_rise"] = parse_bound(value, key)
        elif key == "memory":
            values["memory_rise"] = parse_bound(value, key)
        elif key == "alpha":
            values["alpha"] = parse_alpha(value, key)
        elif key == "history":
            history = value  # checked below, against whichever alpha the pairs set
        elif value in ("fail", "pass"):
            values["fail_inconclusive"] = value == "fail"
        else:
            raise SpecError(f"inconclusive: {value!r} is neither fail nor pass; write inconclusive=fail")
    if history is not None:
        alpha = float(values.get("alpha", 0.01))  # type: ignore[arg-type]
        values["history"] = parse_history(history, "history", alpha)
    return GateBounds(**values)  # type: ignore[arg-type]
