"""The speed decision replayed on kept sessions: false alarms between sessions of identical code (A/A)
and slowdowns caught (A/B), from result files a GPU host wrote, with no device time.

    python tools/gate_replay.py SOURCE [SOURCE ...] [--slowdown 10%,25%] [--workers N] [--max-pairs N]

SOURCE: a results folder or a .tgz/.tar.xz archive of one (docs/results keeps many); archives are
unpacked into a temporary folder. A session is a folder of `*_results/result.json` runs written by
one pytest session; sessions are paired only with sessions of the same git commit (identical code)
and the same device. For every pair:

- A/A: `llmbench gate --baseline A --current B` (a failure is any REGRESSION), and
  `llmbench compare A B` (a winner is a row marked `fastest`, not `tied fastest`);
- A/B: the same gate with B's recorded step times made longer by each --slowdown (tokens/s divided
  by as much), in a copy outside the tree: how often the decision calls the slowdown a REGRESSION
  at one session a side, per strategy.

A slowdown applied to recorded steps is not one injected into a run (LLMBENCH_INJECT_FAULT slow=):
it keeps each step's noise and scales it with the step. The sessions must not be the ones the
decision's prior spread was measured from (tools/session_spread.py lists those in
analysis/decision_spread.json's sources), or the replay is in sample.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CLI = [sys.executable, "-m", "llmbench_pytest.cli"]


def _percent(raw: str) -> list[float]:
    out = []
    for item in raw.split(","):
        value = float(item.strip().rstrip("%")) / (100 if item.strip().endswith("%") else 1)
        if not 0 < value < 10:
            raise argparse.ArgumentTypeError(f"a slowdown is a share such as 10% or 0.1; got {item!r}")
        out.append(value)
    return out


def _unpack(sources: list[Path], into: Path) -> list[Path]:
    folders = []
    for i, src in enumerate(sources):
        if src.is_dir():
            folders.append(src)
        elif tarfile.is_tarfile(src):
            dest = into / f"source-{i}"
            with tarfile.open(src) as archive:
                archive.extractall(dest, filter="data")
            folders.append(dest)
        else:
            raise SystemExit(f"{src}: neither a results folder nor a tar archive of one")
    return folders


def sessions(folders: list[Path]) -> dict[tuple[str, str], list[Path]]:
    """(commit, device) -> the session folders of it (a folder holding runs' result.json)."""
    found: dict[tuple[str, str], set[Path]] = collections.defaultdict(set)
    for folder in folders:
        for result in folder.rglob("*_results/result.json"):
            if "latest" in result.parts:
                continue
            doc = json.loads(result.read_text())
            if doc.get("status") != "ok":
                continue
            meta = doc.get("metadata") or {}
            key = (str(meta.get("git_commit") or "?")[:12], str(doc.get("gpu_name") or doc.get("device")))
            found[key].add(result.parent.parent)
    return {k: sorted(v) for k, v in found.items() if len(v) >= 2}


def _slowed(src: Path, dest: Path, factor: float) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    for result in dest.rglob("result.json"):
        doc = json.loads(result.read_text())
        doc["step_times_sec"] = [t * factor for t in doc.get("step_times_sec") or []]
        for key in ("mean_step_time_sec", "step_time_median_sec", "step_time_std_sec"):
            if doc.get(key) is not None:
                doc[key] *= factor
        for key in ("tokens_per_sec", "samples_per_sec", "tokens_per_sec_per_gpu"):
            if doc.get(key) is not None:
                doc[key] /= factor
        result.write_text(json.dumps(doc))
    return dest


def _verdicts(gate_output: str) -> dict[str, str]:
    """strategy -> its tokens/s verdict in one gate's output (the first line naming it)."""
    out: dict[str, str] = {}
    for line in gate_output.splitlines():
        words = line.split()
        if "tokens/s" in line and len(words) > 2 and words[2].startswith("ws"):
            out.setdefault(words[1], words[0])
    return out


def _pair(a: Path, b: Path, slowdowns: list[float], scratch: Path) -> dict:
    gate = subprocess.run(
        [*CLI, "gate", "--baseline", str(a), "--current", str(b)], check=False, capture_output=True, text=True
    )
    compare = subprocess.run([*CLI, "compare", str(a), str(b)], check=False, capture_output=True, text=True)
    # one configuration a row pair: the reference's row and the compared input's ("1.02x (...)");
    # either marked fastest (not tied fastest) names a winner
    lines = [line.rstrip() for line in compare.stdout.splitlines()]
    rows = [line for line in lines if "x (" in line]
    marked = [r for r in lines if ("x (" in r or " ref " in r) and r.endswith(" fastest")]
    winners = [r for r in marked if not r.endswith("tied fastest")]
    ab = {}
    for s in slowdowns:
        copy = _slowed(b, Path(tempfile.mkdtemp(dir=scratch)) / b.name, 1 + s)
        run = subprocess.run(
            [*CLI, "gate", "--baseline", str(a), "--current", str(copy)],
            check=False,
            capture_output=True,
            text=True,
        )
        ab[s] = _verdicts(run.stdout)
        shutil.rmtree(copy.parent)
    return {
        "aa_exit": gate.returncode,
        "aa": _verdicts(gate.stdout),
        "rows": len(rows),
        "winners": len(winners),
        "ab": ab,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--slowdown", type=_percent, default=[0.10, 0.25], help="e.g. 10%%,25%% (default)")
    parser.add_argument("--workers", type=int, default=2, help="pairs judged at once (2)")
    parser.add_argument("--max-pairs", type=int, default=0, help="at most this many pairs (0: all)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gate-replay-") as tmp:
        groups = sessions(_unpack(args.sources, Path(tmp)))
        pairs = [p for folders in groups.values() for p in itertools.permutations(folders, 2)]
        pairs = pairs[: args.max_pairs] if args.max_pairs else pairs
        if not pairs:
            print("no two sessions of one commit and device: nothing to pair")
            return 0
        with ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(lambda p: _pair(*p, args.slowdown, Path(tmp)), pairs))
    print(f"{len(pairs)} ordered pairs of sessions in {len(groups)} group(s) of one commit and device")
    failed = sum(r["aa_exit"] == 1 for r in results)
    print(f"A/A gate runs failed (any REGRESSION): {failed} / {len(results)}")
    rows, winners = sum(r["rows"] for r in results), sum(r["winners"] for r in results)
    print(f"A/A compare: configuration comparisons naming a winner: {winners} / {rows}")
    for s in args.slowdown:
        caught: collections.Counter[str] = collections.Counter()
        seen: collections.Counter[str] = collections.Counter()
        for r in results:
            for strategy, verdict in r["ab"][s].items():
                seen[strategy] += 1
                caught[strategy] += verdict == "REGRESSION"
        per = ", ".join(f"{k} {caught[k]}/{seen[k]}" for k in sorted(seen))
        total = f"{sum(caught.values())} / {sum(seen.values())}"
        print(f"A/B {s:.0%} slower, one session a side: REGRESSION {total} ({per})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
