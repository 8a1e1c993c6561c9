"""pytest-xdist: configurations spread over workers that each own a slice of the node.

`pytest benchmarks/ -n N` starts N workers; each claims devices // N GPUs (or CPU cores) at
start (config/hardware.share_node) and runs the configurations xdist hands it. The workers
train and record; the controller, the one process the user sees, gathers what they made and
does once, over all of it, what a session does at its end:

- result.json paths, for --llmbench-report and --llmbench-gate (session/end.py);
- pytest-benchmark's records: pytest-benchmark turns itself off under xdist, since it times
  code in the worker processes themselves; llmbench's step times are taken inside the ranks on
  the worker's own devices, so each worker records them and the controller saves one run from
  all of them (--benchmark-autosave, --benchmark-save, --benchmark-json, --benchmark-compare and
  --benchmark-compare-fail then work as without -n). Each record carries `node_shared`;
- the progress lines: the plan, and each configuration's start and end.

Everything travels on the test reports (`report.llmbench`), which xdist already carries from
worker to controller: a worker killed midway loses nothing it had reported.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from .eta import Planned
from .progress import Progress

if TYPE_CHECKING:
    import pytest

    from .progress import Quiet
    from .state import LlmbenchSession

ATTR = "llmbench"
"""The test report attribute a worker fills and the controller reads."""


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def is_controller(config: pytest.Config) -> bool:
    """The process that started workers (-n N, N > 0)."""
    return not is_worker(config) and config.getoption("dist", "no") != "no"


def worker_id(config: pytest.Config) -> tuple[str, int]:
    """(gw<i>, how many workers)."""
    info = config.workerinput  # type: ignore[attr-defined]
    return str(info["workerid"]), int(info["workercount"])


def record_in_worker(config: pytest.Config) -> None:
    """Let pytest-benchmark's fixture record in this worker (it disables itself under xdist)
    but save, compare and print nothing here: the controller does, once, for all workers."""
    bs = getattr(config, "_benchmarksession", None)
    if bs is None:
        return
    bs.disabled = bool(config.getoption("benchmark_disable", False)) and not config.getoption(
        "benchmark_enable", False
    )
    bs.xdist_warning = False
    for name in ("save", "autosave", "json", "compare", "compare_fail", "histogram", "cprofile_dump"):
        setattr(bs, name, None)
    bs.compared_mapping = {}


def _plain(data: Any) -> Any:
    """Only what execnet can carry (pytest-benchmark's options hold Decimals and callables)."""
    return json.loads(json.dumps(data, default=str))


def ship(
    item: pytest.Item, report: pytest.TestReport, session: LlmbenchSession, state: dict[str, Any]
) -> None:
    """In a worker: put on the report what the controller needs (see the module's docstring).
    `state` remembers what was already sent."""
    out: dict[str, Any] = {}
    if not state.get("plan_sent"):
        state["plan_sent"] = True
        out["plan"] = [p.to_dict() for p in state.get("plan", [])]
    sent = state.setdefault("results_sent", 0)
    if len(session.result_paths) > sent:
        out["results"] = [str(p) for p in session.result_paths[sent:]]
        state["results_sent"] = len(session.result_paths)
    if report.when == "call":
        fixture = getattr(item, "funcargs", {}).get("llmbench")
        result = getattr(fixture, "result", None)
        if result is not None:
            out["finished"] = {"status": result["status"], "tokens_per_sec": result.get("tokens_per_sec")}
        bench = getattr(item, "funcargs", {}).get("benchmark")
        stats = getattr(bench, "stats", None)
        if stats and not bench.has_error:
            out["benchmark"] = _plain(stats.as_dict(include_data=True))
    if out:
        setattr(report, ATTR, out)


def gather(
    report: pytest.TestReport, session: LlmbenchSession, config: pytest.Config, progress: Progress | Quiet
) -> None:
    """In the controller: take what a worker put on its report."""
    from pathlib import Path

    data = getattr(report, ATTR, None) or {}
    session.result_paths.extend(Path(p) for p in data.get("results", []))
    if "benchmark" in data:
        _add_benchmark(config, data["benchmark"])
    if not isinstance(progress, Progress):
        return
    if "plan" in data:
        workers = config.getoption("numprocesses", 1)
        progress.add_plan(
            [Planned.from_dict(p) for p in data["plan"]], workers if isinstance(workers, int) else 1
        )
    if report.nodeid not in progress.eta.plan:
        return
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    if report.when == "setup" and report.passed:
        progress.config_started(report.nodeid, None, worker=worker)
    elif report.when == "call" or (report.when == "setup" and not report.passed):
        summary = data.get("finished") or {"status": report.outcome}
        progress.config_finished(report.nodeid, None, worker=worker, summary=summary)


def _add_benchmark(config: pytest.Config, data: dict[str, Any]) -> None:
    """Rebuild a worker's pytest-benchmark record in the controller's session, which saves it."""
    bs = getattr(config, "_benchmarksession", None)
    if bs is None:
        return
    # pytest_benchmark.stats.Metadata is what its own fixture hands to the session; the 5.x
    # range in pyproject.toml pins it, as recording.py's use of _make_stats does
    from pytest_benchmark.stats import Metadata

    fixture = SimpleNamespace(
        name=data["name"],
        fullname=data["fullname"],
        group=data["group"],
        param=data["param"],
        params=data["params"],
        extra_info=data["extra_info"],
        cprofile_stats=None,
        has_error=False,
    )
    record = Metadata(fixture, iterations=1, options=data["options"])
    for seconds in data["stats"]["data"]:
        record.update(seconds)
    bs.benchmarks.append(record)
