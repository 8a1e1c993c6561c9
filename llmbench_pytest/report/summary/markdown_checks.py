"""BENCHMARK_REPORT.md's step jitter and validation checks: how steady each run's steps were
(robustly: median, MAD, p95/p50, outliers with their positions, how well the mean is known), how
each check went over the runs, then every failure with its numbers.

Every check records `passed` (true, false, or null with the reason), `measured`, `limit` and
`message` in result.json (checks/). The summary counts them per check, and names why a check
gave no verdict (the first clause of its message: "world size 1", "CPU timings are smoke"), so a
reader sees what was judged as well as what failed.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ...analysis.stats import Jitter, mean_interval
from .. import fmt
from .md_table import LIST_LIMIT, capped, md_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..collect import Run


def _why_not(message: str) -> str:
    """The reason a check gave no verdict: after 'Not judged: ' when it measured something, else
    the message's first clause."""
    text = message.split("Not judged: ", 1)[-1]
    return text.split(":", 1)[0].split(";", 1)[0].strip()


def _summary(runs: Sequence[Run]) -> list[list[Any]]:
    order: dict[str, Counter[str]] = {}
    reasons: dict[str, Counter[str]] = {}
    for r in runs:
        for c in r.data.get("checks") or []:
            if not isinstance(c, dict) or not c.get("name"):
                continue
            name = str(c["name"])
            verdict = {True: "passed", False: "failed"}.get(c.get("passed"), "no verdict")
            order.setdefault(name, Counter())[verdict] += 1
            if verdict == "no verdict":
                reasons.setdefault(name, Counter())[_why_not(str(c.get("message") or ""))] += 1
    rows = []
    for name, counts in order.items():
        why = "; ".join(f"{reason} ({n})" for reason, n in (reasons.get(name) or Counter()).most_common(2))
        rows.append([name, counts["passed"], counts["failed"], counts["no verdict"], why])
    return rows


def _jitter_rows(runs: Sequence[Run]) -> list[list[Any]]:
    rows = []
    for r in runs:
        times = [float(t) for t in r.data.get("step_times_sec") or []]
        jitter, interval = Jitter.of(times), mean_interval(times)
        if not r.ok or jitter is None or interval is None:
            continue
        where = ", ".join(str(i + 1) for i in jitter.outliers[:8]) + (
            ", ..." if len(jitter.outliers) > 8 else ""
        )
        rows.append(
            [
                f"`{r.name}`",
                len(times),
                fmt.seconds(jitter.median),
                fmt.seconds(jitter.mad),
                f"{jitter.p95_over_p50:.2f}",
                f"{len(jitter.outliers)} (step{'s' if len(jitter.outliers) > 1 else ''} {where})"
                if jitter.outliers
                else "0",
                f"±{interval.relative:.1%}",
            ]
        )
    return rows


def jitter_section(runs: Sequence[Run]) -> list[str]:
    """Within each run: the robust spread of its steps, which fails nothing, and how well its mean
    is known, which the mean_interval check holds to --llmbench-max-interval on GPUs."""
    rows = _jitter_rows(runs)[:LIST_LIMIT]  # every run's is in its result.json
    if not rows:
        return []
    return [
        "",
        "## Step time within each run",
        "",
        "Median and MAD (median absolute deviation) of the measured steps, p95/p50, the outliers (steps "
        "beyond 5 robust standard deviations of the median, counted from 1) and the 95% interval of the "
        "mean step time (allowing for correlated steps, outliers clipped). Jitter alone fails nothing.",
        "",
        *capped(
            md_table(
                ["run", "steps", "median s", "MAD s", "p95/p50", "outliers", "mean known to"], rows
            ).split("\n"),
            "runs",
        ),
    ]


def render(runs: Sequence[Run]) -> list[str]:
    rows = _summary(runs)
    out = [*jitter_section(runs), "", "## Validation checks", ""]
    if rows:
        out += [
            "Per check, over the runs that recorded it: passed, failed, and no verdict (the check does not "
            "apply, with the commonest reasons and how many runs gave each).",
            "",
            md_table(["check", "passed", "failed", "no verdict", "why no verdict"], rows),
        ]
    else:
        out.append("No run recorded its checks (validate() was not called).")
    lines = [f"- `{r.name}` **{c.get('name')}**: {c.get('message')}" for r in runs for c in r.failed_checks]
    out += ["", "## Failed validation checks", ""]
    return out + (capped(lines, "failed checks") if lines else ["Every check that applied passed."])
