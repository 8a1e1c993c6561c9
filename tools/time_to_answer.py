"""Time to answer: how long a benchmark session takes, and how much of it is measuring.

    python tools/time_to_answer.py -- pytest benchmarks/test_pretrain.py --llmbench-world-sizes=1,2
    python tools/time_to_answer.py --json tta.json --goal-wall 150 --goal-share 0.6 -- \
        pytest benchmarks/test_pretrain.py

Runs the pytest command (results into a fresh directory under results/, which git ignores, unless
the command or --results-dir names one), measures its wall time, then reads every result.json it
wrote: the wall time with a measured window open (timing.window_sec from window_started_at_unix;
windows that overlap, on lanes or on pytest-xdist's workers, count once), and its share of the wall
time; per
configuration, where its time went (ranks starting, setup, DeepSpeed ops, warm-up, the window, the
untimed steps after it, and the rest: teardown, checks, pytest). It prints a table, writes the
figures as JSON (time_to_answer.json in the results directory unless --json says where), and with
--goal-wall / --goal-share says whether the session met them. The load average before and after
goes with the figures: on a shared machine it decides them as much as the code does. Exit status:
pytest's, or 1 when a goal was missed. A SIGINT or SIGTERM to this tool goes to the whole session
(pytest records the run in progress as interrupted and ends its ranks); the figures of what ran
are still written.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _child import run_session

from llmbench_pytest.report.collect import find_result_files
from llmbench_pytest.results.storage import LATEST
from llmbench_pytest.session.ops_ahead import JSON_NAME as OPS_AHEAD_JSON

RESULTS_OPTION = "--llmbench-results-dir"
UNFINISHED = {2, 124, 137}
"""Exit codes of a session that did not finish: pytest interrupted, or `timeout` ending it."""


def _results_dir(command: list[str], given: str | None) -> tuple[list[str], Path]:
    for i, arg in enumerate(command):
        if arg.startswith(RESULTS_OPTION + "="):
            return command, Path(arg.split("=", 1)[1])
        if arg == RESULTS_OPTION and i + 1 < len(command):
            return command, Path(command[i + 1])
    if given:
        where = Path(given)
    else:  # never the working tree itself: results/ is where the suite writes, and git ignores it
        Path("results").mkdir(exist_ok=True)
        where = Path(tempfile.mkdtemp(prefix="time-to-answer-", dir="results"))
    return [*command, f"{RESULTS_OPTION}={where}"], where


def _machine() -> dict[str, Any]:
    gpus = None
    if shutil.which("nvidia-smi"):
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
        )
        gpus = [line.strip() for line in out.stdout.splitlines() if line.strip()] or None
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "gpus": gpus,
        "python": platform.python_version(),
    }


def _lane(side: dict[str, Any] | None) -> int | None:
    if not side:
        return None
    return int(side["lane"]) if side.get("lane") else 0


def _row(data: dict[str, Any]) -> dict[str, Any]:
    """One configuration's time, from its result.json."""
    timing = data.get("timing") or {}
    launch = timing.get("launch") or {}
    phases = timing.get("setup_phases") or {}
    measurement = timing.get("measurement") or {}
    total = launch.get("total_sec")
    parts = {
        "start": launch.get("to_first_progress_sec"),
        # a fresh process's imports before its first run, and the peak prediction's trace
        "imports": phases.get("import_sec"),
        "predict": phases.get("predict_sec"),
        "setup": timing.get("setup_sec"),
        "ops": phases.get("ops_sec"),
        "warmup": phases.get("warmup_sec"),
        "window": timing.get("window_sec"),
        "after": phases.get("after_window_sec"),
    }
    known = sum(v for v in parts.values() if v)
    window_start = timing.get("window_started_at_unix")
    ops = timing.get("ops") or {}
    return {
        **_ended_group(data),
        "test": (data.get("metadata") or {}).get("test"),
        "name": f"{data.get('strategy')}-ws{data.get('world_size')}",
        "status": data.get("status"),
        "ranks": launch.get("ranks"),
        # side by side: its lane (1, 2, ...), 0 where it had the node to itself among lanes, None
        # where the session had no lanes at its world size
        "lane": _lane(data.get("side_by_side")),
        "total": total,
        **parts,
        "other": total - known if total is not None else None,
        # compiled here (not loaded from an earlier build): paid once per machine
        "ops_compiled_sec": sum(o.get("sec", 0.0) for o in ops.values() if o.get("compiled")),
        # waited for a build started beside the first configurations (--llmbench-ops-ahead)
        "ops_waited_sec": sum(o.get("waited_sec") or 0.0 for o in ops.values()),
        "window_started_at_unix": window_start,
        "steps": data.get("steps"),
        "stopped": measurement.get("stopped"),
        "precision": measurement.get("precision"),
    }


def window_wall_sec(rows: list[dict[str, Any]]) -> float | None:
    """The wall time with at least one window open: windows that ran side by side (lanes) overlap,
    and that time counts once. None when a run does not say when its window opened (results from
    before 2026-11-27), or no run measured."""
    spans = []
    for r in rows:
        if not r["window"]:
            continue
        if r.get("window_started_at_unix") is None:
            return None
        spans.append((r["window_started_at_unix"], r["window_started_at_unix"] + r["window"]))
    covered, reach = 0.0, float("-inf")
    for begin, end in sorted(spans):
        covered += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    return covered if spans else None


def _ended_group(data: dict[str, Any]) -> dict[str, str | None]:
    """Why this configuration's ranks did not go on to the next one (worker/main.py): its status,
    or what it left behind (memory beyond the limit, torch's process-wide settings changed).
    The next configuration of that world size then paid a fresh start."""
    left = data.get("leftover_after_run") or {}
    why = None
    if data.get("status") not in (None, "ok"):
        why = f"ended {data.get('status')}"
    elif left and not left.get("within_limit", True):
        why = f"left {left.get('gb', 0) * 1000:.0f} MB allocated"
    elif left.get("settings"):
        why = "left " + ", ".join(c["setting"] for c in left["settings"]) + " changed"
    return {"ended_group": why}


def restarts(rows: list[dict[str, Any]]) -> list[str]:
    """Each fresh start a configuration before it caused, as 'NEXT after PREVIOUS REASON'."""
    pairs = itertools.pairwise(rows)
    return [f"{row['name']} after {prev['name']} {prev['ended_group']}" for prev, row in pairs
            if row["ranks"] == "fresh" and prev["ended_group"]]  # fmt: skip


def session_folder(results_dir: Path) -> Path:
    """The session's own folder (results_dir/latest, the session this tool ran), or results_dir
    itself where results were written before sessions had folders."""
    latest = results_dir / LATEST
    return latest if latest.is_dir() else results_dir


def _ops_ahead(results_dir: Path) -> dict[str, Any] | None:
    """What the session's background op build wrote (session/ops_ahead.py), if it ran."""
    try:
        return json.loads((session_folder(results_dir) / OPS_AHEAD_JSON).read_text())
    except (OSError, ValueError):
        return None


def collect(results_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(find_result_files(results_dir), key=lambda p: p.stat().st_mtime):
        try:
            rows.append(_row(json.loads(path.read_text())))
        except (OSError, ValueError) as exc:
            print(f"skipping {path}: {exc}", file=sys.stderr)
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    columns = [
        "name",
        "status",
        "ranks",
        "total",
        "start",
        "imports",
        "predict",
        "setup",
        "ops",
        "warmup",
        "window",
        "after",
        "other",
    ]
    columns += ["steps", "stopped", "precision"]
    cells = [list(columns)]
    for row in rows:
        line = [_cell(row[c]) for c in columns]
        line[-1] = f"+-{row['precision']:.1%}" if row["precision"] is not None else "-"
        cells.append(line)
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--json", help="where to write the figures (default: time_to_answer.json in the results directory)"
    )
    parser.add_argument(
        "--results-dir", help="results directory to pass pytest (default: a fresh one in results/)"
    )
    parser.add_argument("--goal-wall", type=float, help="wall-time goal in seconds")
    parser.add_argument("--goal-share", type=float, help="goal for the measuring share of wall time (0.6)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the pytest command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the pytest command after --, e.g. -- pytest benchmarks/test_pretrain.py")
    if command[0] == "pytest":
        command = [sys.executable, "-m", "pytest", *command[1:]]
    command, results_dir = _results_dir(command, args.results_dir)

    load_before = os.getloadavg()
    started = time.monotonic()
    code = run_session(command, exit_on_signal=False).returncode  # interrupted: still report
    wall = time.monotonic() - started
    load_after = os.getloadavg()

    rows = collect(results_dir)
    summed = sum(r["window"] or 0.0 for r in rows)
    # side by side, windows overlap: the share is of the wall time with a window open, each second
    # once (summed over lanes it could pass 100%); results that lack the windows' start, summed
    once = window_wall_sec(rows)
    measuring = once if once is not None else summed
    builds = sum(r["ops_compiled_sec"] for r in rows)
    waited = sum(r["ops_waited_sec"] for r in rows)
    ahead = _ops_ahead(results_dir)
    figures = {
        "command": command,
        "exit_code": code,
        "wall_sec": wall,
        "measuring_sec": measuring,
        "measuring_share": measuring / wall if wall > 0 else None,
        "measuring_counted": "wall time with a window open" if once is not None else "windows summed",
        "windows_summed_sec": summed,
        "ops_compiled_sec": builds,
        "wall_sec_without_op_builds": wall - builds,
        "ops_ahead": ahead,
        "ops_waited_sec": waited,
        "configurations": len(rows),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "machine": _machine(),
        "results_dir": str(results_dir),
        "rows": rows,
        "side_by_side": sum(1 for r in rows if r.get("lane")),
        "fresh_starts": sum(1 for r in rows if r["ranks"] == "fresh"),
        "restarts": restarts(rows),
    }
    print(table(rows))
    print(
        f"\n{len(rows)} configurations in {wall:.1f} s wall; measured windows {measuring:.1f} s "
        f"({figures['measuring_share']:.0%} of the wall time); pytest exit code {code}; "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    if figures["side_by_side"]:
        how = (
            f"the wall time with a window open, {measuring:.1f} s, counts each second once (summed over "
            f"lanes: {summed:.1f} s{f', {summed / wall:.0%}' if wall > 0 else ''})"
            if once is not None
            else "these results do not say when their windows opened, so the share is summed over lanes "
            "and may pass 100%"
        )
        print(f"{figures['side_by_side']} configurations trained side by side on lanes: {how}")
    if figures["restarts"]:
        print(
            f"fresh ranks {figures['fresh_starts']} times; caused by the run before: "
            + "; ".join(figures["restarts"])
        )
    if builds:
        print(
            f"DeepSpeed ops compiled during the session (once per machine): {builds:.1f} s; "
            f"wall without them {wall - builds:.1f} s"
        )
    if ahead:
        each = ", ".join(f"{n} {'compiled' if o.get('compiled') else 'loaded'} in {o.get('sec', 0):.1f} s"
                         for n, o in ahead.items())  # fmt: skip
        print(f"DeepSpeed ops built beside the configurations from the session's start: {each}; "
              f"configurations waited {waited:.1f} s for them")  # fmt: skip
    missed = []
    finished = code not in UNFINISHED
    if args.goal_wall is not None:
        ok = finished and wall <= args.goal_wall
        missed += [] if ok else ["wall"]
        how = f"{wall:.1f} s" if finished else f"stopped after {wall:.1f} s (exit code {code}), not finished"
        print(f"goal wall <= {args.goal_wall:.0f} s: {'met' if ok else 'MISSED'} ({how})")
    if args.goal_share is not None:
        ok = figures["measuring_share"] is not None and figures["measuring_share"] >= args.goal_share
        missed += [] if ok else ["share"]
        print(f"goal measuring >= {args.goal_share:.0%}: {'met' if ok else 'MISSED'}")
    figures["goals_missed"] = missed
    out = Path(args.json) if args.json else results_dir / "time_to_answer.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    print(f"figures: {out}")
    return code or (1 if missed else 0)


if __name__ == "__main__":
    sys.exit(main())
