"""DeepSpeed's just-in-time ops, built beside the session's first configurations.

On a fresh GPU host the first offload configuration compiles CPU Adam (about 50 s of nvcc; with
async I/O for zero3_nvme about 105 s) while its GPU waits. When the selected benchmarks need such
an op, the session starts `llmbench ops` for exactly those ops in the background as soon as
collection has finished: the configurations that need no op train meanwhile (the default matrix
puts offload last), and a rank that needs an op still being built waits on the build's lock
(worker/ops.py) instead of building it a second time. An op already built only loads.

What the build took is written to ops-ahead.json (and its output to ops-ahead.log) in the results
directory and said in one line at the session's end, apart from every run's own time. A session
that ends first (interrupted, or nothing left that needs the op) stops the build; the lock
handling of worker/ops.py clears what a stopped build leaves.

--llmbench-ops-ahead: auto (the default) builds ahead on a GPU only; on a 2-core CPU machine a
build beside the first configuration would slow what that configuration measures. yes: on any
device; no: never (each rank builds what it needs when it needs it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from ..config.spec import RunSpec

JSON_NAME = "ops-ahead.json"
LOG_NAME = "ops-ahead.log"


def needed(specs: Iterable[RunSpec], device_type: str) -> list[str]:
    """The ops (by `llmbench ops` names) the selected configurations load: CPU Adam for offload,
    async I/O for NVMe, and on a CPU the shared-memory all-reduce of every DeepSpeed run."""
    specs = list(specs)
    offloads = {spec.offload for spec in specs}
    names = []
    if device_type == "cpu" and any(spec.name.startswith("zero") for spec in specs):
        names.append("shm_comm")
    if offloads - {"none"}:
        names.append("cpu_adam")
    if "nvme" in offloads:
        names.append("async_io")
    return names


def wanted(setting: str, device_type: str) -> bool:
    """--llmbench-ops-ahead: auto builds ahead on a GPU only."""
    return setting == "yes" or (setting == "auto" and device_type == "cuda")


@dataclass
class AheadBuild:
    names: list[str]
    process: subprocess.Popen[bytes]
    json_path: Path
    started: float

    def finish(self, interrupted: bool) -> list[str]:
        """Stop a build still running (nothing left needs it, or the session was interrupted) and
        say in a line what the build did."""
        if self.process.poll() is None:
            stop_process_group(self.process)
            if interrupted:
                return []
            return [
                f"DeepSpeed ops {', '.join(self.names)}: the build started beside the first "
                f"configurations was still running after {time.monotonic() - self.started:.0f} s and "
                "was stopped (no configuration left needed it)"
            ]
        return [summary(self.names, self.json_path, self.process.returncode)]


def start(names: list[str], device_type: str, folder: Path) -> AheadBuild:
    """`llmbench ops --ops NAMES` in a process group of its own, its output to FOLDER/ops-ahead.log
    and its figures to FOLDER/ops-ahead.json (the session's own folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / JSON_NAME
    json_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "llmbench_pytest.cli", "ops", "--ops", ",".join(names),
               "--device", device_type, "--json", str(json_path)]  # fmt: skip
    with open(folder / LOG_NAME, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return AheadBuild(names, process, json_path, time.monotonic())


def summary(names: list[str], json_path: Path, code: int | None) -> str:
    """One line: each op compiled (with its time) or found built, or why the build failed."""
    try:
        built: dict[str, Any] = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return (
            f"DeepSpeed ops {', '.join(names)}: the build ahead ended with exit code {code} and wrote no "
            f"figures; see {json_path.with_name(LOG_NAME)} (each rank builds what it needs instead)"
        )
    parts = []
    for name in names:
        got = built.get(name) or {}
        if "error" in got:
            parts.append(f"{name} not built ({got['error']})")
        elif got.get("compiled"):
            parts.append(f"{name} compiled in {got['sec']:.1f} s")
        else:
            parts.append(f"{name} already built ({got.get('sec', 0.0):.1f} s to load)")
    return "DeepSpeed ops built beside the first configurations, apart from their times: " + "; ".join(parts)


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM to a process group started beside the session (a build: the compiler included),
    SIGKILL after a grace."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
