"""Replay a finished session's ETA from its result files, to see how right the progress line was.

    python tools/eta_replay.py RESULTS_DIR [RESULTS_DIR ...] [--json out.json]

Each RESULTS_DIR is one session's folder (its runs' result.json, found at any depth). The session is
played again through session/eta.py as the progress line computed it: every configuration planned
with the guess `expected_seconds` makes of it (its side_by_side record says how many trained at once
beside it), started and finished at the times result.json records (started_at, and the launcher's
total seconds after it). At the start and at each configuration's end the ETA is compared with the
time the session really had left. Prints, per session: the first ETA against the session's real
length, and the ETA's median and largest error over the ends (relative to the time that was left,
the last few seconds left out, where any error is a large share of nothing). One configuration at a
time or on lanes, as result.json records; a pytest-xdist session's workers are not replayed as such.
A folder of several sessions is replayed as one (the gaps between them count as no configuration's
time): give each session's folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmbench_pytest.config.spec import RunSpec, SpecError
from llmbench_pytest.session.eta import Eta, Planned, expected_seconds, start_kind

TAIL_S = 30.0
"""Ends with less than this left are not judged: a few seconds off is a large share of nothing."""


def _spec(run: dict[str, Any]) -> RunSpec | None:
    """The run's spec as result.json recorded it, or None where this code reads it no more (a field
    an older result carried that the spec has since dropped)."""
    try:
        return RunSpec.from_dict(run)
    except (SpecError, TypeError, ValueError):
        return None


def configurations(folder: Path) -> list[dict[str, Any]]:
    """The session's runs in the order they started: spec, start and end (epoch seconds), lanes."""
    out = []
    for path in sorted(folder.rglob("result.json")):
        r = json.loads(path.read_text())
        run = (r.get("config") or {}).get("run")
        started = (r.get("metadata") or {}).get("started_at")
        total = ((r.get("timing") or {}).get("launch") or {}).get("total_sec")
        spec = _spec(run) if run else None
        if spec is None or not started or total is None:
            continue
        start = datetime.strptime(started, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        lanes = (r.get("side_by_side") or {}).get("lanes") or 1
        name = str(path.parent.relative_to(folder))  # two sessions' runs of one name stay apart
        out.append(
            {"name": name, "spec": spec, "start": start, "end": start + float(total), "at_once": int(lanes)}
        )
    return sorted(out, key=lambda c: c["start"])


def replay(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ETA at the start and after each end, beside the time really left."""
    plan, seen = {}, {}  # planned in the session's order: each start as start_kind names it
    for c in configs:
        guess = expected_seconds(c["spec"], 1, start_kind(c["spec"], seen, c["at_once"]))
        plan[c["name"]] = Planned(c["name"], c["name"], c["spec"].name, guess, c["at_once"])
    eta = Eta(plan)
    begin, end = configs[0]["start"], max(c["end"] for c in configs)
    events = sorted(
        [(c["start"], 1, c["name"]) for c in configs] + [(c["end"], 0, c["name"]) for c in configs]
    )
    points = []
    for when, is_start, name in events:
        if is_start:
            eta.start(name, when)
            continue
        eta.finish(name, when)
        left = end - when
        if left >= TAIL_S:
            points.append((when - begin, eta.remaining_s(when), left))
    eta_first = Eta(dict(eta.plan))
    first = eta_first.remaining_s(begin)
    errors = [abs(guess / left - 1) for _, guess, left in points]
    return {
        "configurations": len(configs),
        "session_sec": end - begin,
        "first_eta_sec": first,
        "first_eta_over_real": first / (end - begin),
        "median_error": statistics.median(errors) if errors else None,
        "largest_error": max(errors) if errors else None,
        "points": [{"elapsed_sec": t, "eta_sec": g, "left_sec": w} for t, g, w in points],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results_dirs", nargs="+", metavar="RESULTS_DIR")
    ap.add_argument("--json", help="write every session's replay here")
    args = ap.parse_args()
    out = {}
    print("| session | configurations | real | first ETA | first / real | median error | largest error |")
    print("|---|---|---|---|---|---|---|")
    for folder in args.results_dirs:
        configs = configurations(Path(folder))
        if not configs:
            print(f"{folder}: no result.json with a configuration and its times", file=sys.stderr)
            continue
        got = out[folder] = replay(configs)
        median, largest = got["median_error"], got["largest_error"]
        print(
            f"| {folder} | {got['configurations']} | {got['session_sec']:.0f} s | "
            f"{got['first_eta_sec']:.0f} s | {got['first_eta_over_real']:.2f} | "
            f"{'-' if median is None else f'{median:.0%}'} | {'-' if largest is None else f'{largest:.0%}'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if out else 2


if __name__ == "__main__":
    sys.exit(main())
