"""How far a configuration's mean step time moves from one pytest session to the next, per strategy
workload and device, measured from saved results: the prior spread llmbench's speed decision uses where a
side has one session (analysis/decision.py).

    python tools/session_spread.py docs/results                 # print the table
    python tools/session_spread.py docs/results --write         # and write analysis/decision_spread.json
    python tools/session_spread.py docs/results /tmp/gate-aa --write    # CPU sessions too

Every result.json under the folders is read. Runs are grouped by what should give the same speed:
the configuration (model, strategy, world size, shapes, precision, workload, techniques), the
device (CPU, or the GPU model), the git commit and the host cores each rank had; runs of one group
from one pytest session are that session's measurement (repeats and duplicates averaged on the log
scale). Within each group the sessions' log means are centred on their group's mean (so a code
change between commits or another model is not counted as noise) and the squares pooled:

    sd = sqrt(sum over groups and sessions of (log m - group mean)^2 / sum over groups of (k - 1))

per device, workload (causal_lm, lora, seq2seq) and strategy; over every GPU model ("GPU"); and
over every strategy or workload ("*"). The workload decides most of it: a GPU-bound pre-training
step moves by about 0.5-2% between sessions, a host-bound encoder-decoder step by 15%. The
sessions of one group ran on one host or several (lent machines are fresh per call and results do
not name the host): the spread holds both, which is what a comparison between two sessions meets.
Runs without a session id (written before sessions were named), failed runs and runs with a fault
injected (result.json's injected_fault) are left out. Nothing here is typed in: the figures are the
data's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmbench_pytest.analysis.decision_prior import PRIOR_FILE
from llmbench_pytest.report.collect import ReportError, load_results
from llmbench_pytest.report.records import key_of

REPO = Path(__file__).resolve().parents[1]
MIN_DF = 3
"""Entries pooled from fewer degrees of freedom are printed but not written: too few to lean on."""


def level(data: dict[str, Any]) -> tuple[Any, ...] | None:
    """What should give the same speed, or None for a run that cannot say (failed, no session)."""
    meta = data.get("metadata") or {}
    if data.get("status", "ok") != "ok" or not data.get("mean_step_time_sec") or not meta.get("session"):
        return None
    if data.get("injected_fault"):  # a slowed or jittered run: a test's fault, not the noise
        return None
    device = "CPU" if data.get("device") == "cpu" else str(data.get("gpu_name") or meta.get("gpu_name") or "")
    if not device:
        return None
    threads = (meta.get("host_share") or {}).get("threads") or meta.get("cpu_threads_per_rank")
    return (key_of(data), device, str(meta.get("git_commit") or ""), threads)


def sessions_by_level(folders: list[Path]) -> dict[tuple[Any, ...], dict[str, list[float]]]:
    """Per group, each session's log mean step times (one per run)."""
    out: dict[tuple[Any, ...], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for folder in folders:
        try:
            runs = load_results(folder).runs
        except ReportError as exc:
            print(f"{folder}: {exc}", file=sys.stderr)
            continue
        for run in runs:
            key = level(dict(run.data))
            if key is not None:
                session = str(run.data["metadata"]["session"])
                out[key][session].append(math.log(float(run.data["mean_step_time_sec"])))
    return out


Name = tuple[str, str, str]
"""(device, workload, strategy); "GPU" for every GPU model, "*" for every workload or strategy."""


def devices_of(device: str) -> list[str]:
    """The device's own entry, and for a GPU model the one of every GPU."""
    return [device] if device == "CPU" else [device, "GPU"]


def names(device: str, workload: str, strategy: str) -> list[Name]:
    """Every entry a group of sessions counts towards."""
    pairs = ((workload, strategy), (workload, "*"), ("*", "*"))
    return [(d, w, s) for d in devices_of(device) for w, s in pairs]


Levels = dict[tuple[Any, ...], dict[str, list[float]]]
"""sessions_by_level's answer: read once, then pooled and shaped."""


def shapes(levels: Levels) -> dict[str, list[list[Any]]]:
    """Per device (and "GPU"), the shapes (workload, model, sequence, batch) whose sessions the
    spreads were measured from, for the reader; a prior speaks for their (workload, model) pairs only
    (analysis/decision_prior.py)."""
    out: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
    for (key, device, _, _), by_session in levels.items():
        if len(by_session) < 2:
            continue
        for d in devices_of(device):
            out[d].add((key.workload, key.model, key.seq_len, key.per_device_batch))
    return {d: [list(s) for s in sorted(v)] for d, v in sorted(out.items())}


def pooled(levels: Levels) -> list[dict[str, Any]]:
    """The pooled spread per (device, workload, strategy), with every GPU model as "GPU" and every
    workload or strategy as "*"."""
    squares: dict[Name, float] = defaultdict(float)
    dfs: dict[Name, int] = defaultdict(int)
    sessions: dict[Name, int] = defaultdict(int)
    groups: dict[Name, int] = defaultdict(int)
    largest: dict[Name, float] = defaultdict(float)
    for (key, device, _, _), by_session in levels.items():
        means = [sum(v) / len(v) for v in by_session.values()]
        if len(means) < 2:
            continue
        centre = sum(means) / len(means)
        ss = sum((m - centre) ** 2 for m in means)
        far = max(abs(m - centre) for m in means)
        for name in names(device, key.workload, key.strategy):
            squares[name] += ss
            dfs[name] += len(means) - 1
            sessions[name] += len(means)
            groups[name] += 1
            largest[name] = max(largest[name], far)
    return [
        {
            "device": n[0],
            "workload": n[1],
            "strategy": n[2],
            "sd_log": round(math.sqrt(squares[n] / dfs[n]), 5),
            "df": dfs[n],
            "sessions": sessions[n],
            "groups": groups[n],
            "largest_deviation_log": round(largest[n], 5),
        }
        for n in sorted(dfs, key=lambda n: (n[0] == "GPU", n[0], n[1] == "*", n[1], n[2] == "*", n[2]))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", type=Path, nargs="+", help="results folders (docs/results, ...)")
    parser.add_argument("--write", action="store_true", help=f"write {PRIOR_FILE.relative_to(REPO)}")
    parser.add_argument(
        "--out",
        type=Path,
        default=PRIOR_FILE,
        help="write there instead (llmbench reads it from $LLMBENCH_SESSION_SPREAD)",
    )
    args = parser.parse_args()
    # each folder that holds runs, by name: the file says exactly what it was measured from, and a
    # results folder added later changes it only when the tool is run again
    folders = [
        f
        for root in args.folders
        for f in sorted(root.iterdir())
        if f.is_dir() and any(f.rglob("result.json"))
    ]
    levels = sessions_by_level(folders)
    rows = pooled(levels)
    heads = ("device", "workload", "strategy", "sd", "df", "sessions", "groups", "largest")
    print("{:<22} {:<10} {:<14} {:>7} {:>4} {:>8} {:>6} {:>8}".format(*heads))
    for r in rows:
        print(
            f"{r['device']:<22} {r['workload']:<10} {r['strategy']:<14} {r['sd_log']:>7.2%} {r['df']:>4} "
            f"{r['sessions']:>8} {r['groups']:>6} {r['largest_deviation_log']:>8.2%}"
        )
    if args.write:
        kept = [r for r in rows if r["df"] >= MIN_DF]
        doc = {
            "what": "the spread of one session's log mean step time around its configuration's level",
            "command": "python tools/session_spread.py "
            + " ".join(str(f) for f in args.folders)
            + " --write",
            "date": datetime.date.today().isoformat(),
            "sources": [str(f) for f in folders],
            "min_df": MIN_DF,
            "shapes": shapes(levels),
            "spreads": kept,
        }
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}: {len(kept)} of {len(rows)} entries (df >= {MIN_DF})")


if __name__ == "__main__":
    main()
