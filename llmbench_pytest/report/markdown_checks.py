"""BENCHMARK_REPORT.md's validation checks: how each check went over the runs, then every
failure with its numbers.

Every check records `passed` (true, false, or null with the reason), `measured`, `limit` and
`message` in result.json (checks/). The summary counts them per check, and names why a check
gave no verdict (the first clause of its message: "world size 1", "CPU timings are smoke"), so a
reader sees what was judged as well as what failed.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from .md_table import capped, md_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .collect import Run


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


def render(runs: Sequence[Run]) -> list[str]:
    rows = _summary(runs)
    out = ["", "## Validation checks", ""]
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
