"""Loading a results folder: every result.json under it, each wrapped as a Run.

Standard library only. A file that cannot be read (truncated by a killed job, hand-edited, not a
result at all) is reported by name and left out; the rest are still used. A folder that is missing
or holds no result file at all is an error, because a report of nothing reads like a report of
success.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..results.liveness import judge_running
from ..results.schema import RESULT_FILE, current_fields
from ..results.storage import is_session_folder

SUMMARY_DIR = "summary"

_REPEAT = re.compile(r"-r(\d+)$")  # results.claim_run_paths names a configuration's later runs -r2, -r3, ...


class ReportError(Exception):
    """Input the report cannot work with; the message says what and how to fix it."""


@dataclass(frozen=True)
class Run:
    """One result.json and where it was found."""

    path: Path
    """The result.json file."""
    data: Mapping[str, Any]
    """Its parsed content."""

    @property
    def name(self) -> str:
        """The run's directory name without the `_results` suffix (the benchmark card's naming)."""
        name = self.path.parent.name
        return name.removesuffix("_results")

    @property
    def order(self) -> tuple[str, str, int]:
        """Sort key: by folder, then run name, repeats in the order they ran (-r2 after the first, -r10
        after -r9), which plain path order does not give."""
        m = _REPEAT.search(self.name)
        stem, k = (self.name[: m.start()], int(m.group(1))) if m else (self.name, 1)
        return (str(self.path.parent.parent), stem, k)

    @property
    def session(self) -> str:
        """The pytest session that wrote it: its folder's name (results/<started>-<session id>/,
        results/storage.py), else the session id in its metadata, else "unnamed" (written before
        sessions were named)."""
        folder = os.path.basename(os.path.realpath(self.path.parent.parent))  # results/latest too
        if is_session_folder(folder):
            return folder
        return str((self.data.get("metadata") or {}).get("session") or "unnamed")

    @property
    def strategy(self) -> str:
        return str(self.data.get("strategy"))

    @property
    def world_size(self) -> int:
        return int(self.data.get("world_size") or 1)

    @property
    def status(self) -> str:
        return str(self.data.get("status") or "ok")

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.data.get("tokens_per_sec") is not None

    @property
    def device(self) -> str:
        device = self.data.get("device") or (self.data.get("metadata") or {}).get("device")
        if device:
            return str(device)
        # the benchmark card's thirteen fields alone: a peak VRAM figure means a GPU ran it
        return "cuda" if self.data.get("peak_vram_gb") is not None else "unknown"

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def gpu_name(self) -> str | None:
        return self.data.get("gpu_name") or (self.data.get("metadata") or {}).get("gpu_name")

    @property
    def hardware(self) -> str:
        """'NVIDIA H200', 'CPU' or 'unknown device': what the numbers were measured on."""
        if self.is_cpu:
            return "CPU"
        return self.gpu_name or ("GPU" if self.device == "cuda" else "unknown device")

    @property
    def memory_gb(self) -> float | None:
        """Peak memory per rank: GPU peak allocated (the benchmark card's peak_vram_gb); on CPU,
        host RSS."""
        if self.is_cpu:
            return self.data.get("peak_host_rss_gb")
        return self.data.get("peak_vram_gb")

    @property
    def memory_kind(self) -> str:
        return "host RSS" if self.is_cpu else "GPU allocated"

    @property
    def failed_checks(self) -> list[Mapping[str, Any]]:
        return [
            c for c in self.data.get("checks") or [] if isinstance(c, Mapping) and c.get("passed") is False
        ]

    @property
    def memory_check_failed(self) -> bool:
        return any(c.get("name") == "peak_memory" for c in self.failed_checks)

    @property
    def running_note(self) -> str:
        """For a run left as "running": 'unfinished (last heard of at <time>: <phase>)' when its
        session is gone, 'still running (last heard of at ...)' when it is alive; else ''."""
        state = self.data.get("running_state")
        if self.status not in ("running", "unfinished") or not isinstance(state, Mapping):
            return ""
        what = "still running" if self.status == "running" else "unfinished"
        return f"{what} (last heard of at {state.get('last_heard_at')}: {state.get('last_heard')})"

    @property
    def error_line(self) -> str:
        text = str(self.data.get("error") or "").strip()
        first = text.splitlines()[0] if text else ""
        return first if len(first) <= 300 else first[:297] + "..."


@dataclass
class Collection:
    """The readable runs of a results folder, and the files that could not be read."""

    root: Path
    """The folder that was searched."""
    runs: list[Run] = field(default_factory=list)
    """Every readable result file, in path order."""
    problems: list[str] = field(default_factory=list)
    """One line per unreadable file: its path and why."""
    left_out: list[str] = field(default_factory=list)
    """One line per configuration run in several sessions: the older sessions' runs left out
    (configs.one_session_each)."""
    older_runs: int = 0
    """How many readable runs those lines leave out."""

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    @property
    def any_cpu(self) -> bool:
        return any(r.is_cpu for r in self.runs)

    @property
    def commits(self) -> list[str]:
        return commits_of(r.data for r in self.runs)


def commits_of(results: Iterable[Mapping[str, Any]]) -> list[str]:
    """The git commits (short) the results were measured at, in first-seen order."""
    seen = ((d.get("metadata") or {}).get("git_commit") for d in results)
    return list(dict.fromkeys(str(c)[:10] for c in seen if c))


def find_result_files(root: Path) -> list[Path]:
    """Every result.json under root, skipping the report's own summary folder and hidden folders."""
    found: list[Path] = []
    # os.walk with pruning rather than rglob: a results folder may also hold pytest-benchmark
    # storage or a virtualenv, and descending into those costs seconds on large trees
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != SUMMARY_DIR)
        if RESULT_FILE in filenames:
            found.append(Path(dirpath) / RESULT_FILE)
    return sorted(found)


def read_run(path: Path) -> Run:
    """One result.json; raises ReportError naming the file and what is wrong with it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # a run killed mid-write leaves a prefix of the document: it cannot end with its closing brace
        body = text.rstrip()
        what = "empty" if not body else "not valid JSON" if body.endswith(("}", "]")) else "truncated"
        raise ReportError(f"{path}: {what} ({exc.msg} at line {exc.lineno}); left out") from None
    if not isinstance(data, dict) or "strategy" not in data:
        raise ReportError(f"{path}: not an llmbench result (no 'strategy' field); left out")
    return Run(path, judged(path, current_fields(data)))


def judged(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """A result as the report reads it: one left as "running" by a session that is gone (killed
    by SIGKILL, the OOM killer, a time limit) becomes "unfinished", never a run that did not fit;
    either way `running_state` says when it was last heard of and how that was decided
    (results/liveness.py)."""
    if data.get("status") != "running":
        return data
    state = judge_running(path, data)
    status = "running" if state.alive else "unfinished"
    out = {**data, "status": status, "running_state": state.to_dict()}
    if data.get("mfu_reason") == "run did not finish (running)":  # the placeholder's (results/build.py)
        out["mfu_reason"] = f"run did not finish ({status})"
    return out


def load_results(results_dir: Path | str, only: Iterable[Path | str] | None = None) -> Collection:
    """Every readable run under results_dir (a folder, or one result.json file); with `only`, just
    those result files (a pytest session's own runs in a folder that holds earlier ones too).

    Raises ReportError when the folder is missing or holds no readable result.
    """
    root = Path(results_dir)
    if root.is_file() and tarfile.is_tarfile(root):
        # docs/results keeps sessions as archives: read from an unpacked copy
        raise ReportError(
            f"{root} is an archive, not a results folder: unpack it (mkdir runs && tar xf {root} -C runs) "
            "and give the folder"
        )
    if root.is_file():
        return Collection(root.parent, [read_run(root)])
    if not root.exists():
        raise ReportError(
            f"results folder {root} does not exist. Pass the folder the benchmarks wrote "
            "(--llmbench-results-dir, default: results)."
        )
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder or a result.json file")
    paths = sorted(Path(p) for p in only) if only is not None else find_result_files(root)
    collection = Collection(root)
    for path in paths:
        try:
            collection.runs.append(read_run(path))
        except ReportError as exc:
            collection.problems.append(str(exc))
    if not paths:
        raise ReportError(
            f"no {RESULT_FILE} under {root}: nothing to report. Run the benchmarks first "
            f"(pytest benchmarks/ --llmbench-results-dir={root}) or point at the folder they wrote."
        )
    collection.runs.sort(key=lambda r: r.order)
    if not collection.runs:
        raise ReportError(
            f"none of the {len(paths)} {RESULT_FILE} files under {root} could be read:\n  "
            + "\n  ".join(collection.problems)
        )
    return collection
