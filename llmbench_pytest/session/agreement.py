"""Under torchrun every rank runs pytest; these keep the ranks in step.

- Collection: all ranks must collect the same tests in the same order, or the collectives of
  one test would meet those of another.
- Outcomes: after each phase (setup, call, teardown) the ranks exchange their outcome. A
  failure on any rank becomes a failure on all, a skip on any rank a skip on all, so no rank
  walks into a test's collectives while another has left it: nothing deadlocks, and rank 0's
  report names the rank and its message.
The exchange runs over the session's gloo control group, which outlives a broken NCCL group.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .state import LlmbenchSession

_MAX_TEXT = 3000


def check_collection(session: LlmbenchSession, nodeids: list[str]) -> None:
    from ..worker.dist import all_gather_object

    digest = hashlib.sha256("\n".join(nodeids).encode()).hexdigest()
    everyone = all_gather_object(session.dist(), (digest, len(nodeids), nodeids[:3]))
    mine = everyone[session.env.rank]
    differ = [r for r, other in enumerate(everyone) if other[0] != mine[0]]  # type: ignore[index]
    if differ:
        counts = ", ".join(f"rank {r}: {c[1]} tests" for r, c in enumerate(everyone))  # type: ignore[index]
        raise pytest.UsageError(
            f"ranks collected different tests ({counts}); every rank must run the same selection. "
            "Give all ranks the same arguments and files (options that differ per rank, such as "
            "--lf with unshared caches, split the selection)."
        )


def _text(report: pytest.TestReport) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr or "")[-_MAX_TEXT:]


def agree(session: LlmbenchSession, report: pytest.TestReport) -> None:
    """Make this rank's report carry the outcome every rank agrees on."""
    from ..worker.dist import all_gather_object

    mine = (report.outcome, _text(report))
    everyone: list[Any] = all_gather_object(session.dist(), mine)
    me = session.env.rank
    failed = [(r, t) for r, (o, t) in enumerate(everyone) if o == "failed"]
    skipped = [(r, t) for r, (o, t) in enumerate(everyone) if o == "skipped"]
    if failed and report.outcome != "failed":
        rank, text = failed[0]
        report.outcome = "failed"
        report.longrepr = f"rank {rank} failed in {report.when} (rank {me} did not):\n{text}"
    elif not failed and skipped and report.outcome == "passed":
        rank, text = skipped[0]
        report.outcome = "skipped"
        path, lineno, _ = report.location
        report.longrepr = (path, (lineno or 0) + 1, f"rank {rank} skipped: {text}")
    elif failed and report.outcome == "failed" and me == 0:
        others = [r for r, _ in failed if r != me]
        if others:
            report.sections.append(("llmbench", f"also failed on rank(s) {others}"))
