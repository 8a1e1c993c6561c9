"""Choose the number of warm-up steps from GPU runs already measured: how far each warm-up step
of each run lay from the run's own settled step time (the median of its measured window), and
what a shorter warm-up would have let into the window.

    python3 tools/warmup_steps.py docs/results/2026-11-26-h100-whole-suite
    python3 tools/warmup_steps.py DIR --tolerance 0.10 --json out.json
    python3 tools/warmup_steps.py docs/results --by-strategy --warmup 2
    python3 tools/warmup_steps.py DIR OTHER_DIR --min-seq 1024 --by-strategy --json out.json

Reads every rank-0 result.json under each DIR (searched recursively), and every result.json
member of the *.tgz / *.tar.gz archives under it (read in memory, never extracted; such a run's
path reads ARCHIVE.tgz:member/path/result.json), whose `timing.warmup_step_sec` lists the
warm-up's steps (recorded since 2026-11-26; host clock, each step ending when its loss reached
the host). A run kept both as a folder and in an archive counts once: runs are the same when
their strategy, warm-up steps and first window steps are the same numbers. Runs with a `seq_len`
below --min-seq (default 512) are left out: the GPU tests' tiny smoke runs have host-bound, noisy
steps, and a warm-up default is not chosen for them.

For a warm-up of k steps, the first measured step would have been the run's warm-up step k+1 (for
k as long as the run's own warm-up: its first measured step, by CUDA events on a GPU): the table
gives, per k, the worst such step against the run's median, how many runs would have measured a
step more than the tolerance off their median, and the seconds of warm-up the whole set of runs
would have spent. The smallest k with no run beyond the tolerance is the one to choose.

--by-strategy adds one row per strategy for the warm-up of --warmup K steps (default 2), over
the runs that recorded more than K warm-up steps: the share of them whose warm-up step K+1 (the
step a K-step warm-up would have measured first) lies beyond the tolerance from the run's median,
against the share of those runs' own window steps (all of `step_times_sec`, pooled) beyond it;
the median absolute relative deviation of each; and the mean signed deviation of step K+1. Where
step K+1 lies no further from the median than the window's own steps do, a (K+1)-th warm-up step
buys nothing for that strategy. (Step K+1 is on the host clock, the window's steps on CUDA
events: a few per cent of host-side lag can show as a small positive signed deviation.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

SAME_RUN_STEPS = 5
"""How many first window steps, with the strategy and the warm-up steps, tell one run from another."""


def _results(root: Path) -> Iterator[tuple[str, bytes]]:
    """(path relative to root, contents) of each result.json under root: files, then archive members."""
    for path in sorted(root.rglob("result.json")):
        if path.is_file():
            yield str(path.relative_to(root)), path.read_bytes()
    archives = {p for pattern in ("*.tgz", "*.tar.gz") for p in root.rglob(pattern) if p.is_file()}
    for archive in sorted(archives):
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                if not member.isfile() or Path(member.name).name != "result.json":
                    continue
                stream = tar.extractfile(member)
                if stream is not None:
                    yield f"{archive.relative_to(root)}:{member.name}", stream.read()


def warmup_runs(roots: Path | list[Path], min_seq: int = 0) -> tuple[list[dict], dict]:
    """Each GPU run under the roots with its warm-up steps and its window's median step time, and
    how many runs were left out as copies of another or for their sequence length."""
    roots = [roots] if isinstance(roots, Path) else roots
    runs, seen, left_out = [], set(), {"duplicates": 0, "below_min_seq": 0}
    for root in roots:
        for path, text in _results(root):
            data = json.loads(text)
            warmup = (data.get("timing") or {}).get("warmup_step_sec")
            times = data.get("step_times_sec")
            if data.get("device") != "cuda" or data.get("status") != "ok" or not warmup or not times:
                continue
            key = (data["strategy"], tuple(warmup), tuple(times[:SAME_RUN_STEPS]))
            if key in seen:
                left_out["duplicates"] += 1
                continue
            seen.add(key)
            seq_len = data.get("seq_len")
            if seq_len is not None and seq_len < min_seq:
                left_out["below_min_seq"] += 1
                continue
            median = statistics.median(times)
            # the warm-up's steps, then the first measured one: what a warm-up as long as this
            # run's let into its window
            ratios = [t / median for t in [*warmup, times[0]]]
            runs.append({"path": path if len(roots) == 1 else f"{root}/{path}",
                         "strategy": data["strategy"], "workload": data.get("workload"),
                         "seq_len": seq_len, "ratios": ratios,
                         "window_ratios": [t / median for t in times],
                         "warmup_sec": warmup, "median_sec": median})  # fmt: skip
    return runs, left_out


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


def by_strategy(runs: list[dict], tolerance: float, warmup: int) -> list[dict]:
    """Per strategy, for a warm-up of `warmup` steps: its warm-up step warmup+1 against the window's
    own steps, over the runs that recorded more than `warmup` warm-up steps."""
    rows = []
    for strategy in sorted({r["strategy"] for r in runs}):
        mine = [r for r in runs if r["strategy"] == strategy]
        judged = [r for r in mine if len(r["warmup_sec"]) > warmup]
        # signed relative deviation from the run's median: of its warm-up step warmup+1, of each
        # step of its window
        step = [r["ratios"][warmup] - 1 for r in judged]
        window = [ratio - 1 for r in judged for ratio in r["window_ratios"]]
        rows.append({
            "strategy": strategy,
            "runs": len(mine),
            "runs_judged": len(judged),
            "window_steps": len(window),
            "step_beyond_share": _share(step, tolerance),
            "window_beyond_share": _share(window, tolerance),
            "step_abs_dev_median": statistics.median(abs(d) for d in step) if step else None,
            "window_abs_dev_median": statistics.median(abs(d) for d in window) if window else None,
            "step_dev_mean": statistics.fmean(step) if step else None,
        })  # fmt: skip
    return rows


def _share(deviations: list[float], tolerance: float) -> float | None:
    """The share of deviations beyond the tolerance (None for none)."""
    if not deviations:
        return None
    return sum(abs(d) > tolerance for d in deviations) / len(deviations)


def _print(rows: list[dict], runs: list[dict], roots: list[Path], tolerance: float, left_out: dict,
           min_seq: int) -> None:  # fmt: skip
    where = ", ".join(str(root) for root in roots)
    print(f"{len(runs)} GPU runs with their warm-up steps under {where}; tolerance +-{tolerance:.0%}")
    print(f"left out: {left_out['duplicates']} copies of a run already read (folder and archive), "
          f"{left_out['below_min_seq']} runs with seq_len below {min_seq} (--min-seq)")  # fmt: skip
    print(f"{'warm-up':>7}  {'first measured, worst':>22}  {'runs beyond':>11}  {'warm-up s':>9}  worst run")
    for row in rows:
        worst, beyond, spent = row["first_measured_worst"], row["runs_beyond_tolerance"], row["warmup_sec"]
        print(f"{row['warmup']:>7}  {worst:>21.2f}x  {beyond:>11}  {spent:>9.1f}  {row['worst_run']}")
    fits = [row["warmup"] for row in rows if row["runs_beyond_tolerance"] == 0]
    print(f"smallest warm-up with no run beyond the tolerance: {fits[0] if fits else 'none of these'}")


def _pct(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{value:+.1%}" if signed else f"{value:.1%}"


def _print_by_strategy(rows: list[dict], tolerance: float, warmup: int) -> None:
    step = f"step {warmup + 1}"
    print()
    print(f"by strategy, warm-up of {warmup} steps: its first measured step would be warm-up {step};")
    print(f"beyond = share more than +-{tolerance:.0%} off the run's median; |dev| = median absolute "
          f"relative deviation; runs = all / with more than {warmup} warm-up steps")  # fmt: skip
    header = ["strategy", "runs", f"{step} beyond", "window beyond", f"{step} |dev|", "window |dev|",
              f"{step} mean dev", "window steps"]  # fmt: skip
    lines = [
        [row["strategy"], f"{row['runs']}/{row['runs_judged']}", _pct(row["step_beyond_share"]),
         _pct(row["window_beyond_share"]), _pct(row["step_abs_dev_median"]),
         _pct(row["window_abs_dev_median"]), _pct(row["step_dev_mean"], signed=True),
         str(row["window_steps"])]
        for row in rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, *lines]:
        cells = [
            line[0].ljust(widths[0]),
            *(cell.rjust(w) for cell, w in zip(line[1:], widths[1:], strict=True)),
        ]
        print("  ".join(cells))
    worse = [
        row["strategy"]
        for row in rows
        if row["runs_judged"] and row["step_beyond_share"] > row["window_beyond_share"]
    ]
    print(f"warm-up {step} beyond the tolerance more often than the window's own steps: "
          f"{', '.join(worse) if worse else 'no strategy'}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "roots",
        type=Path,
        nargs="+",
        metavar="root",
        help="a folder of result.json files and *.tgz / *.tar.gz archives of them (searched recursively)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.10,
        help="how far from its run's median a first measured step may lie (default 0.10)",
    )
    parser.add_argument(
        "--min-seq",
        type=int,
        default=512,
        help="leave out runs whose seq_len is below this (default 512: the tiny smoke runs)",
    )
    parser.add_argument(
        "--by-strategy", action="store_true", help="also a table per strategy for a warm-up of --warmup steps"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="the warm-up length the --by-strategy table judges (default 2)"
    )
    parser.add_argument("--json", help="also write the rows and the runs here")
    args = parser.parse_args(argv)
    for root in args.roots:
        if not root.is_dir():
            parser.error(f"{root} is not a folder")
    if args.warmup < 0:
        parser.error("--warmup must be 0 or more")
    runs, left_out = warmup_runs(args.roots, args.min_seq)
    where = ", ".join(str(root) for root in args.roots)
    if not runs:
        print(f"no GPU run with timing.warmup_step_sec under {where} (seq_len >= {args.min_seq}; "
              f"{left_out['below_min_seq']} below it)", file=sys.stderr)  # fmt: skip
        return 1
    rows = table(runs, args.tolerance)
    _print(rows, runs, args.roots, args.tolerance, left_out, args.min_seq)
    strategies = by_strategy(runs, args.tolerance, args.warmup) if args.by_strategy else None
    if strategies is not None:
        _print_by_strategy(strategies, args.tolerance, args.warmup)
    if args.json:
        figures = {"tolerance": args.tolerance, "min_seq": args.min_seq, "left_out": left_out,
                   "rows": rows, "runs": runs}  # fmt: skip
        if strategies is not None:
            figures["warmup"] = args.warmup
            figures["by_strategy"] = strategies
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
