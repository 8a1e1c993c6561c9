"""The default suite's wall time on a node of more GPUs, planned from a session's measured figures.

    python tools/suite_plan.py TTA.json [TTA.json ...] [--gpus 2,4,8] [--extra-per-world-size S]
        [--leave-out GLOB ...] [--only-at-one GLOB ...] [--window-cap S]

Reads tools/time_to_answer.py's JSON of sessions run at world sizes 1 and 2 (each configuration's
measured time from its test's start to its end: ranks, setup, warm-up, window, teardown) and plans
the same suite on a node of G GPUs, at world sizes 1, 2, 4, ... up to G, two ways:

- *one at a time* (`--llmbench-side-by-side=no`): every configuration in turn, each world
  size's one group of ranks kept warm, the other GPUs idle;
- *side by side* (what `pytest benchmarks/` does since --llmbench-side-by-side): at world size w,
  G / w configurations at once on disjoint GPUs (each with its own warm group of ranks), except those
  that load the host (CPU offload, NVMe, data from disk), which run alone;
  each world size's configurations packed longest first onto the lanes;

and the floor under both: the measured windows alone (no start, set-up, warm-up, profiled steps or
teardown), every configuration beside others, at each world size the larger of their even share of
the lanes and the longest window. No order of the suite beats it without shorter windows (the
window's budget, the suite's configurations). Sessions whose files lack the windows
(time_to_answer.py's rows before 2026-11-27) have no floor.

A world size the sessions did not run takes its configuration's figure at the largest world size
they did (weak scaling: the same work per GPU; the 4x H200 host of the issues ran test_pretrain at
1, 2 and 4 GPUs in 428 s, 143 s a world size, against 146 s a world size on 2x H200). Nothing here
is measured at the planned sizes: it is the plan the 4- and 8-GPU issues check. Fixed costs per
session (a fresh host's DeepSpeed builds, overlapped with the first configurations) are left out;
--extra-per-world-size adds what the sessions' files do not hold (the LoRA diagnostic matrix: about
65 s a world size on 2x H200).

Its first line adds the sessions up as they ran: a suite measured in several sessions (one device
call each) took their walls' sum, and its measured share is their windows over that sum; a session
its command stopped early (a call's time limit) is named.

What a shorter suite would take, for a decision between its options (planned, not measured: the
suite is not changed by them):
- `--leave-out GLOB`: configurations whose test id without its world size matches (fnmatch, e.g.
  'test_lora_diagnostic*') are left out at every world size;
- `--only-at-one GLOB`: those matched run at world size 1 only;
- `--window-cap S`: every window above world size 1 ends at S seconds at the latest, and its
  configuration's time shortens by what it loses; as a hard budget would, which today's window is
  not (it runs on past its budget until the mean is known to +-10%: ZeRO-3 LoRA's took 36-63 s of
  a 20 s budget on 4x H200).
"""

from __future__ import annotations

import argparse
import fnmatch
import heapq
import json
import math
import sys
from pathlib import Path
from typing import Any

HOST_HEAVY = ("_offload", "_nvme", "-disk")
"""Configurations that load what a lane does not divide (the host's memory and PCIe, the drive):
never beside another, as launch/lanes.alone_reason has it (CPU and NVMe offload, data from disk)."""


def configurations(paths: list[Path], key: str = "total") -> dict[tuple[str, int], float]:
    """(configuration without its world size, world size) -> seconds (`key`: its whole time, or its
    window), from the sessions' rows."""
    out: dict[tuple[str, int], float] = {}
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            if row.get("status") != "ok" or not row.get("total"):
                continue
            test = row["test"].split("::")[-1]
            ws = int(row["name"].rsplit("-ws", 1)[1])
            out[(test.replace(f"-ws{ws}-", "-"), ws)] = float(row.get(key) or 0.0)
    return out


def left_in(measured: dict[tuple[str, int], float], leave_out: list[str]) -> dict[tuple[str, int], float]:
    """`measured` (or the windows: configurations() of the same rows) without the configurations
    matched by `leave_out`."""
    return {
        (n, ws): t for (n, ws), t in measured.items() if not any(fnmatch.fnmatch(n, g) for g in leave_out)
    }


def _world_sizes(gpus: int) -> list[int]:
    sizes, w = [], 1
    while w <= gpus:
        sizes.append(w)
        w *= 2
    return sizes


def _packed(times: list[float], lanes: int) -> float:
    """The wall time of `times` on `lanes` lanes, longest first onto the lane free first."""
    free = [0.0] * max(1, lanes)
    for t in sorted(times, reverse=True):
        heapq.heapreplace(free, free[0] + t)
    return max(free)


def _floor(times: list[float], lanes: int) -> float:
    """A lower bound on the wall time of `times` on `lanes` lanes, whatever the order."""
    return max(sum(times) / max(1, lanes), max(times, default=0.0))


def _at(measured: dict[tuple[str, int], float], w: int, largest: dict[str, int]) -> dict[str, float]:
    """Each configuration's seconds at world size w: measured there, else at its largest measured."""
    return {n: measured.get((n, w), measured[(n, largest[n])]) for n in largest}


def plan(
    measured: dict[tuple[str, int], float],
    gpus: int,
    extra: float,
    windows: dict[tuple[str, int], float],
    at_one_only: frozenset[str] = frozenset(),
    cap: float | None = None,
) -> dict[str, Any]:
    """`windows` holds the same configurations as `measured` (configurations() of the same rows);
    the configurations named in `at_one_only` are planned at world size 1 only, and with `cap`
    every window above world size 1 (measured there or taken from a smaller one) ends after `cap`
    seconds, its configuration's time cut by as much. A world size no configuration runs at is
    left out of the plan."""
    every = {n: max(w for m, w in measured if m == n) for n in sorted({name for name, _ in measured})}
    rows = []
    for w in _world_sizes(gpus):
        largest = {n: top for n, top in every.items() if w == 1 or n not in at_one_only}
        if not largest:
            continue
        times, wins = _at(measured, w, largest), _at(windows, w, largest)
        if cap is not None and w > 1:
            cut = {n: max(0.0, wins[n] - cap) for n in wins}
            times = {n: t - cut[n] for n, t in times.items()}
            wins = {n: t - cut[n] for n, t in wins.items()}
        heavy = [t for n, t in times.items() if any(h in n for h in HOST_HEAVY)]
        light = [t for n, t in times.items() if not any(h in n for h in HOST_HEAVY)]
        rows.append(
            {
                "world_size": w,
                "configurations": len(times),
                "assumed_from_world_size": None
                if any((n, w) in measured for n in largest)
                else max(largest.values()),
                "one_at_a_time_sec": sum(times.values()) + extra,
                "side_by_side_sec": _packed(light, gpus // w) + sum(heavy) + extra / (gpus // w),
                # the floor under any order of these windows: nothing but the measured windows, every
                # configuration beside others; no packing on the lanes beats their even share, nor
                # the longest window
                "windows_floor_sec": _floor(list(wins.values()), gpus // w),
                "lanes": gpus // w,
            }
        )
    return {
        "gpus": gpus,
        "world_sizes": rows,
        "one_at_a_time_sec": sum(r["one_at_a_time_sec"] for r in rows),
        "side_by_side_sec": sum(r["side_by_side_sec"] for r in rows),
        "windows_floor_sec": sum(r["windows_floor_sec"] for r in rows),
    }


def measured_sessions(paths: list[Path]) -> dict[str, Any]:
    """The sessions as they ran, added up: a suite measured in several sessions (one device call
    each) has its wall time as their sum and its measured share as their windows' (each session's
    counted once where lanes overlap, time_to_answer.py's measuring_sec) over that sum. Files that
    lack a figure (time_to_answer.py's before it was kept) are named, not counted as zero."""
    docs = [json.loads(path.read_text()) for path in paths]
    unrecorded = [str(p) for p, d in zip(paths, docs, strict=True) if d.get("wall_sec") is None]
    walls = [float(d.get("wall_sec") or 0.0) for d in docs]
    windows = [d.get("measuring_sec") for d in docs]
    wall = sum(walls)
    open_sec = sum(float(w) for w in windows) if None not in windows else None
    return {
        "sessions": len(docs),
        "configurations": sum(int(d.get("configurations") or len(d.get("rows") or [])) for d in docs),
        "wall_sec": None if unrecorded else wall,
        "walls_sec": walls,
        "window_open_sec": open_sec,
        "window_open_share": open_sec / wall if open_sec is not None and wall and not unrecorded else None,
        "not_recorded": unrecorded,
        "stopped_early": [
            str(p) for p, d in zip(paths, docs, strict=True) if d.get("exit_code") not in (0, 1, None)
        ],
    }


def _measured_line(m: dict[str, Any]) -> str:
    if m["not_recorded"]:
        return f"measured: the wall time is not recorded in {', '.join(m['not_recorded'])}"
    walls = " + ".join(f"{w:.1f}" for w in m["walls_sec"])
    opened = (
        f", a window open {m['window_open_sec']:.1f} s ({m['window_open_share']:.2%})"
        if m["window_open_share"] is not None
        else ""
    )
    early = f"; stopped before its end (exit status not 0 or 1): {', '.join(m['stopped_early'])}"
    return (
        f"measured: {m['configurations']} configurations in {m['sessions']} session(s), {walls} = "
        f"{m['wall_sec']:.1f} s ({m['wall_sec'] / 60:.1f} min){opened}{early if m['stopped_early'] else ''}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sessions", nargs="+", type=Path, help="tools/time_to_answer.py JSON files")
    ap.add_argument("--gpus", default="2,4,8", help="node sizes to plan (default 2,4,8)")
    ap.add_argument("--extra-per-world-size", type=float, default=0.0, metavar="S")
    ap.add_argument("--leave-out", action="append", default=[], metavar="GLOB",
                    help="plan without the configurations whose test name (after '::', no -wsN) "
                    "matches, e.g. 'test_lora_diagnostic*' (repeatable)")  # fmt: skip
    ap.add_argument("--only-at-one", action="append", default=[], metavar="GLOB",
                    help="plan these at world size 1 only, e.g. '*-disk]' (repeatable)")  # fmt: skip
    ap.add_argument("--window-cap", type=float, metavar="S",
                    help="plan each window above world size 1 as ending after S seconds")  # fmt: skip
    ap.add_argument("--json", type=Path, help="write the plans here")
    args = ap.parse_args()
    measured = configurations(args.sessions)
    windows = left_in(configurations(args.sessions, "window"), args.leave_out)
    refused = _refusal(args, measured, windows)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    sizes = [int(g) for g in args.gpus.split(",")]
    measured = left_in(measured, args.leave_out)
    at_one = frozenset(n for n, _ in measured if any(fnmatch.fnmatch(n, g) for g in args.only_at_one))
    plans = [plan(measured, g, args.extra_per_world_size, windows, at_one, args.window_cap) for g in sizes]
    has_floor = any(windows.values())
    sessions = measured_sessions(args.sessions)
    print(_measured_line(sessions))
    changes = _changes(args)
    if changes:
        print(f"planned with: {changes}")
    print("| GPUs | world sizes | one at a time | side by side | the windows alone, all side by side |")
    print("|---|---|---|---|---|")
    for p in plans:
        ws = ", ".join(str(r["world_size"]) for r in p["world_sizes"])
        one, side, floor = (p[k] / 60 for k in ("one_at_a_time_sec", "side_by_side_sec", "windows_floor_sec"))
        least = f"{floor:.1f} min" if has_floor else "-"
        print(f"| {p['gpus']} | {ws} | {one:.1f} min | {side:.1f} min | {least} |")
    if args.json:
        doc = {
            "sessions": [str(s) for s in args.sessions],
            "measured": sessions,
            "what_if": changes or None,
            "plans": plans,
        }
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


def _refusal(
    args: argparse.Namespace, measured: dict[tuple[str, int], float], windows: dict[tuple[str, int], float]
) -> str | None:
    """Why these files and options give no plan, naming the fix; None when they give one
    (`windows`: those left in)."""
    if not measured:
        return "no finished configuration in these files"
    if not all(g.strip().isdigit() and int(g) > 0 for g in args.gpus.split(",")):
        return f"--gpus {args.gpus!r}: give GPU counts, comma-separated (2,4,8)"
    cap = args.window_cap
    if cap is not None and not (math.isfinite(cap) and cap > 0):
        return f"--window-cap {cap}: give the longest window in seconds, above 0"
    return _what_if_refusal(args, measured, windows)


def _what_if_refusal(
    args: argparse.Namespace, measured: dict[tuple[str, int], float], windows: dict[tuple[str, int], float]
) -> str | None:
    names = {n for n, _ in measured}
    for glob in args.leave_out + args.only_at_one:
        if not any(fnmatch.fnmatch(n, glob) for n in names):
            return f"{glob!r} matches no configuration; they are named like {min(names)!r}"
    if not left_in(measured, args.leave_out):
        return "--leave-out left no configuration to plan"
    if args.window_cap is not None and not any(windows.values()):
        return "--window-cap: these files hold no windows (time_to_answer.py's before 2026-11-27)"
    return None


def _changes(args: argparse.Namespace) -> str:
    """The what-ifs of this plan in words ('' for the suite as measured)."""
    parts = [f"left out {g}" for g in args.leave_out]
    parts += [f"{g} at world size 1 only" for g in args.only_at_one]
    if args.window_cap is not None:
        parts.append(f"windows above world size 1 ended at {args.window_cap:g} s")
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
