"""Choose the number of warm-up steps from GPU runs already measured: how far each warm-up step
of each run lay from the run's own settled step time (the median of its measured window), and
what a shorter warm-up would have let into the window.

    python3 tools/warmup_steps.py docs/results/2026-11-26-h100-whole-suite
    python3 tools/warmup_steps.py DIR --tolerance 0.10 --json out.json

Reads every rank-0 result.json under DIR whose `timing.warmup_step_sec` lists the warm-up's steps
(recorded since 2026-11-26; host clock, each step ending when its loss reached the host). For a
warm-up of k steps, the first measured step would have been the run's warm-up step k+1 (for k as
long as the run's own warm-up: its first measured step, by CUDA events on a GPU): the table
gives, per k, the worst such step against the run's median, how many runs would have measured a
step more than the tolerance off their median, and the seconds of warm-up the whole set of runs
would have spent. The smallest k with no run beyond the tolerance is the one to choose.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def warmup_runs(root: Path) -> list[dict]:
    """Each GPU run under root with its warm-up steps and its window's median step time."""
    runs = []
    for path in sorted(root.rglob("result.json")):
        data = json.loads(path.read_text())
        warmup = (data.get("timing") or {}).get("warmup_step_sec")
        times = data.get("step_times_sec")
        if data.get("device") != "cuda" or data.get("status") != "ok" or not warmup or not times:
            continue
        median = statistics.median(times)
        # the warm-up's steps, then the first measured one: what a warm-up as long as this run's
        # let into its window
        ratios = [t / median for t in [*warmup, times[0]]]
        runs.append({"path": str(path.relative_to(root)), "strategy": data["strategy"],
                     "workload": data.get("workload"), "ratios": ratios,
                     "warmup_sec": warmup, "median_sec": median})  # fmt: skip
    return runs


def table(runs: list[dict], tolerance: float) -> list[dict]:
    """One row per warm-up length k every run can judge (k up to the shortest warm-up recorded)."""
    judged = min(len(r["ratios"]) for r in runs)  # the shortest warm-up recorded bounds every row
    rows = []
    for k in range(judged):
        # the step a warm-up of k steps would have measured first: the run's warm-up step k+1
        first = [(r["ratios"][k], r) for r in runs]
        worst, worst_run = max(first, key=lambda pair: abs(pair[0] - 1))
        off = [r for ratio, r in first if abs(ratio - 1) > tolerance]
        rows.append({
            "warmup": k,
            "first_measured_worst": worst,
            "worst_run": f"{worst_run['workload']} {worst_run['strategy']} ({worst_run['path']})",
            "runs_beyond_tolerance": len(off),
            "warmup_sec": sum(sum(r["warmup_sec"][:k]) for r in runs),
        })  # fmt: skip
    return rows


def _print(rows: list[dict], runs: list[dict], root: Path, tolerance: float) -> None:
    print(f"{len(runs)} GPU runs with their warm-up steps under {root}; tolerance +-{tolerance:.0%}")
    print(f"{'warm-up':>7}  {'first measured, worst':>22}  {'runs beyond':>11}  {'warm-up s':>9}  worst run")
    for row in rows:
        worst, beyond, spent = row["first_measured_worst"], row["runs_beyond_tolerance"], row["warmup_sec"]
        print(f"{row['warmup']:>7}  {worst:>21.2f}x  {beyond:>11}  {spent:>9.1f}  {row['worst_run']}")
    fits = [row["warmup"] for row in rows if row["runs_beyond_tolerance"] == 0]
    print(f"smallest warm-up with no run beyond the tolerance: {fits[0] if fits else 'none of these'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path, help="a folder of result.json files (searched recursively)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.10,
        help="how far from its run's median a first measured step may lie (default 0.10)",
    )
    parser.add_argument("--json", help="also write the rows and the runs here")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a folder")
    runs = warmup_runs(args.root)
    if not runs:
        print(f"no GPU run with timing.warmup_step_sec under {args.root}", file=sys.stderr)
        return 1
    rows = table(runs, args.tolerance)
    _print(rows, runs, args.root, args.tolerance)
    if args.json:
        figures = {"tolerance": args.tolerance, "rows": rows, "runs": runs}
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
