"""Wall time of the same benchmark session with and without pytest-xdist, and how much of it
was measuring.

    python tools/time_xdist.py                                  # test_pretrain.py at world size 1, -n 2
    python tools/time_xdist.py -n 8 -- --llmbench-world-sizes=1 # on an 8-GPU host
    python tools/time_xdist.py -n 4 -- --llmbench-world-sizes=2 # world size 2 on 8 GPUs
    python tools/time_xdist.py --results DIR ...                # keep both sessions' result files

Each session runs in the repository root with its own results directory under a fresh temporary
folder (so neither finds the other's runs), one after the other: without -n first, then with
it. Printed per session: the wall time, pytest's outcome line, the sum of the measured windows
(`timing.window_sec` of every result.json) and the 1-minute load average before and after
(a shared machine's other work shows there). CPU figures are smoke: they show the sessions
overlap, not how fast anything trains. A SIGINT or SIGTERM to this tool ends the session running
(pytest, its workers and ranks) and the tool, before the next session.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _child import run_session

from llmbench_pytest.report.collect import find_result_files

REPO = Path(__file__).resolve().parents[1]


def session(label: str, pytest_args: list[str], results: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_pretrain.py", "-p", "no:cacheprovider", "-q"]
    cmd += [f"--llmbench-results-dir={results}", *pytest_args]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    proc = run_session(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    lines = proc.stdout.splitlines()
    outcome = next((ln for ln in reversed(lines) if " in " in ln and ("passed" in ln or "failed" in ln)), "")
    windows = [
        json.loads(Path(f).read_text()).get("timing", {}).get("window_sec") or 0.0
        for f in find_result_files(results)
    ]
    return {
        "session": label,
        "command": " ".join(cmd[2:]),
        "wall_s": round(wall, 1),
        "exit": proc.returncode,
        "outcome": outcome.strip("= "),
        "failed": [ln.split(" - ")[0].removeprefix("FAILED ") for ln in lines if ln.startswith("FAILED ")],
        "runs": len(windows),
        "measured_s": round(sum(windows), 1),
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--workers", default="2", help="pytest-xdist workers (a number or auto)")
    parser.add_argument("--results", type=Path, help="keep both sessions' results here (serial/, xdist/)")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments for both sessions")
    args = parser.parse_args()
    extra = args.pytest_args or ["--llmbench-world-sizes=1"]
    with tempfile.TemporaryDirectory(prefix="llmbench-xdist-") as tmp:
        where = args.results.resolve() if args.results else Path(tmp)
        rows = [
            session("serial", extra, where / "serial"),
            session(f"-n {args.workers}", [*extra, "-n", args.workers], where / "xdist"),
        ]
    for row in rows:
        print(json.dumps(row))
    serial, parallel = rows[0]["wall_s"], rows[1]["wall_s"]
    print(f"-n {args.workers}: {parallel} s vs {serial} s serial ({parallel / serial:.2f}x the wall time)")  # type: ignore[operator]
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
