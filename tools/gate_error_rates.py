"""The regression gate's false-alarm rate and power, measured on real runs.

    python tools/gate_error_rates.py collect /tmp/gate-aa --sessions 20     # real pytest sessions
    python tools/gate_error_rates.py analyse /tmp/gate-aa                   # the rates, from them

collect runs the suite SESSIONS times, one pytest session after another, each with
--llmbench-repeat=REPEAT, into DIR/session-NN/ (the same code, the same machine: every difference
between two sessions is noise). analyse then gates disjoint pairs of consecutive sessions
(1 against 2, 3 against 4, ...) per configuration, as `llmbench gate` would:

- A/A, REPEAT runs a side: all of each session's repeats (runs as the unit);
- A/A, one run a side: repeat k of one session against repeat k of the other, for every k
  (the block bootstrap of per-step times);
- power: the same pairs with every step time of the current side multiplied by 1 + SLOWDOWN (a
  simulated slowdown: the real runs' noise, shifted by exactly the slowdown);
- history: each session in turn as the current run against the sessions before it, as they are
  (false alarms) and with session i's step times multiplied by (1 + DRIFT)^i (a slow drift of
  DRIFT a session that no single comparison with the previous session flags).

A false alarm is a REGRESSION verdict on a metric; the rates are per metric, with Clopper-Pearson
95% intervals. Inconclusive verdicts are counted apart: by default they do not fail the gate.
A SIGINT or SIGTERM to collect ends the session running (pytest and what it started) and collect.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _child import run_session
from scipy.stats import binomtest

from llmbench_pytest.analysis.significance import INCONCLUSIVE, REGRESSION
from llmbench_pytest.config.gate_bounds import MIN_SPREAD_RUNS, min_history
from llmbench_pytest.report.collect import load_results
from llmbench_pytest.report.gate import GateBounds, run_gate
from llmbench_pytest.report.gate.history import History, Point
from llmbench_pytest.report.records import merge_repeats, record_from_result, records_from_results

REPO = Path(__file__).resolve().parents[1]
Doc = dict[str, Any]


def collect(out: Path, sessions: int, repeat: int, steps: int, seq_lens: str) -> None:
    """SESSIONS pytest sessions of the suite on CPU, one after another."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks/test_pretrain.py",
        "--llmbench-device=cpu",
        "--llmbench-world-sizes=1",
        "--llmbench-strategies=ddp",
        "--llmbench-launch=inprocess",
        f"--llmbench-repeat={repeat}",
        f"--llmbench-steps={steps}",
        "--llmbench-warmup=3",
        f"--llmbench-seq-lens={seq_lens}",
        # the checks are not under test here: a noisy run must still be written, not failed
        "--llmbench-max-cv=1",
        "--llmbench-max-repeat-spread=1",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    for i in range(1, sessions + 1):
        target = out / f"session-{i:02d}"
        started = time.monotonic()
        run_session([*cmd, f"--llmbench-results-dir={target}"], cwd=REPO, capture_output=True)
        load = os.getloadavg()[0]
        print(f"{target}: {time.monotonic() - started:.0f} s, load average {load:.1f}", flush=True)


def scaled(doc: Mapping[str, Any], factor: float) -> Doc:
    """A run as if every step had taken `factor` times as long (tokens/s divided by it)."""
    d = copy.deepcopy(dict(doc))
    d["step_times_sec"] = [t * factor for t in d["step_times_sec"]]
    for k in ("mean_step_time_sec", "step_time_std_sec", "step_time_median_sec"):
        if d.get(k) is not None:
            d[k] *= factor
    for k in ("tokens_per_sec", "samples_per_sec"):
        if d.get(k) is not None:
            d[k] /= factor
    d["repeats"] = None  # the merged repeats' spread is recomputed from the runs themselves
    return d


def sessions_of(root: Path) -> list[dict[tuple[Any, ...], list[Doc]]]:
    """Per session (in order), its finished runs per configuration, repeats in order."""
    out = []
    for folder in sorted(p for p in root.iterdir() if p.name.startswith("session-")):
        runs: dict[tuple[Any, ...], list[Doc]] = {}
        for run in sorted(load_results(folder).runs, key=lambda r: r.order):
            if run.data.get("status") == "ok":
                runs.setdefault(record_from_result(run.data, str(run.path)).key, []).append(dict(run.data))
        out.append(runs)
    return out


class Tally:
    """Verdicts per metric over many comparisons."""

    def __init__(self) -> None:
        self.n: dict[str, int] = {}
        self.hits: dict[str, int] = {}
        self.inconclusive: dict[str, int] = {}

    def add(self, metric: str, verdict: str) -> None:
        self.n[metric] = self.n.get(metric, 0) + 1
        self.hits[metric] = self.hits.get(metric, 0) + (verdict == REGRESSION)
        self.inconclusive[metric] = self.inconclusive.get(metric, 0) + (verdict == INCONCLUSIVE)

    def lines(self, what: str) -> list[str]:
        out = []
        for metric, n in self.n.items():
            k = self.hits[metric]
            ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
            out.append(
                f"  {what:<14} {metric:<12} {k:>3} / {n:<3} = {k / n:6.1%}  "
                f"(95% CI {ci.low:.1%} .. {ci.high:.1%}); inconclusive {self.inconclusive[metric]}"
            )
        return out


def gate_pair(base: list[Doc], cur: list[Doc], bounds: GateBounds, tally: Tally) -> None:
    result = run_gate(records_from_results(base), records_from_results(cur), bounds)
    for ch in result.changes:
        tally.add(ch.metric, ch.verdict)


def earlier_runs(sessions: list[dict[tuple[Any, ...], list[Doc]]], key: tuple[Any, ...], k: int) -> History:
    """Repeat k of each given session as one earlier run: the history a CI with one run a day keeps."""
    points = [
        Point(f"session-{i:02d}", record_from_result(s[key][k], ""))
        for i, s in enumerate(sessions, start=1)
        if key in s and len(s[key]) > k
    ]
    return History(Path("sessions"), {points[0].record.key: points} if points else {})


def session_pairs(n: int, every: bool) -> list[tuple[int, int]]:
    """Disjoint pairs of consecutive sessions (0-1, 2-3, ...: independent comparisons), or with
    `every` each session against each later one (more comparisons from few sessions, not independent)."""
    if every:
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    return [(i, i + 1) for i in range(0, n - 1, 2)]


def pairs(
    sessions: list[dict[tuple[Any, ...], list[Doc]]],
    bounds: GateBounds,
    transform: Callable[[Doc], Doc],
    every: bool = False,
) -> tuple[Tally, Tally, Tally]:
    """Tallies over pairs of sessions: all repeats a side; one run a side (block bootstrap); one run
    a side against the spread of the sessions before the pair (where MIN_SPREAD_RUNS came
    before it)."""
    repeats, single, spread = Tally(), Tally(), Tally()
    for i, j in session_pairs(len(sessions), every):
        a, b = sessions[i], sessions[j]
        for key in a.keys() & b.keys():
            base, cur = a[key], [transform(d) for d in b[key]]
            gate_pair(base, cur, bounds, repeats)
            for k, (x, y) in enumerate(zip(base, cur, strict=False)):
                gate_pair([x], [y], bounds, single)
                if i >= MIN_SPREAD_RUNS:
                    hist = earlier_runs(sessions[:i], key, k)
                    result = run_gate(records_from_results([x]), records_from_results([y]), bounds, hist)
                    for ch in result.changes:
                        spread.add(ch.metric, ch.verdict)
    return repeats, single, spread


def history_rates(
    sessions: list[dict[tuple[Any, ...], list[Doc]]], bounds: GateBounds, drift: float
) -> Tally:
    """Each session as the current run against up to bounds.history before it, from the first
    with enough sessions before it for the change-point test."""
    tally = Tally()
    for t in range(min_history(bounds.alpha) + 1, len(sessions) + 1):
        for key, docs in sessions[t - 1].items():
            points = []
            for i, sess in enumerate(sessions[: t - 1], start=1):
                if key in sess:
                    recs = [record_from_result(scaled(d, (1 + drift) ** i), "") for d in sess[key]]
                    points.append(Point(f"session-{i:02d}", merge_repeats(recs)[0]))
            current = records_from_results([scaled(d, (1 + drift) ** t) for d in docs])
            hist = History(Path("sessions"), {key: points})
            for h in run_gate(None, current, bounds, hist).history:
                tally.add(h.metric, h.verdict)
    return tally


def analyse(root: Path, alpha: float, slowdown: float, drift: float, window: int, every: bool) -> None:
    sessions = sessions_of(root)
    counts = sorted({len(v) for s in sessions for v in s.values()})
    print(f"{root}: {len(sessions)} sessions, runs per configuration per session: {counts}")
    bounds = GateBounds(alpha=alpha, history=window)
    print(bounds.describe())
    print(
        f"pairs of sessions: {'every session against each later one' if every else 'disjoint, consecutive'}"
    )
    same = pairs(sessions, bounds, dict, every)
    slower = pairs(sessions, bounds, lambda d: scaled(d, 1 + slowdown), every)
    print(f"A/A (false alarms; alpha {alpha:g}):")
    print("\n".join(same[0].lines(f"{counts[-1]} runs a side") + same[1].lines("1 run a side")))
    print("\n".join(same[2].lines("1 run, history")))
    print(f"power against a simulated {slowdown:.0%} slowdown (REGRESSION verdicts):")
    print("\n".join(slower[0].lines(f"{counts[-1]} runs a side") + slower[1].lines("1 run a side")))
    print("\n".join(slower[2].lines("1 run, history")))
    print(f"history over up to {window} earlier sessions, as measured (false alarms):")
    print("\n".join(history_rates(sessions, bounds, 0.0).lines("history A/A")))
    print(f"history with a simulated drift of {drift:.0%} a session (flagged):")
    print("\n".join(history_rates(sessions, bounds, drift).lines("history drift")))
    print(f"one session against the previous one under that drift (flagged, {drift:.0%} < the bound):")
    drifting = pairs(sessions, bounds, lambda d: scaled(d, 1 + drift), every)
    print("\n".join(drifting[0].lines(f"{counts[-1]} runs a side")))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    col = sub.add_parser("collect", help="run the suite SESSIONS times into DIR/session-NN")
    col.add_argument("out", type=Path)
    col.add_argument("--sessions", type=int, default=20)
    col.add_argument("--repeat", type=int, default=3)
    col.add_argument("--steps", type=int, default=20)
    col.add_argument("--seq-lens", default="64,128")
    ana = sub.add_parser("analyse", help="false alarms and power from the sessions in DIR")
    ana.add_argument("root", type=Path)
    ana.add_argument("--alpha", type=float, default=0.01)
    ana.add_argument("--slowdown", type=float, default=0.10)
    ana.add_argument("--drift", type=float, default=0.03)
    ana.add_argument("--window", type=int, default=20)
    ana.add_argument("--every-pair", action="store_true", help="each session against each later one")
    args = parser.parse_args()
    if args.command == "collect":
        collect(args.out, args.sessions, args.repeat, args.steps, args.seq_lens)
    else:
        analyse(args.root, args.alpha, args.slowdown, args.drift, args.window, args.every_pair)


if __name__ == "__main__":
    main()
