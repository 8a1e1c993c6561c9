"""The speed decision's false alarms and power, measured on real pytest sessions.

    # identical code, separate sessions (A); then the same with one strategy slowed by 10% (B)
    python tools/gate_error_rates.py collect DIR --label a --sessions 40
    python tools/gate_error_rates.py collect DIR --label b --sessions 20 --slow ddp:10% --reference DIR
    python tools/gate_error_rates.py analyse DIR                       # the rates, from them
    python tools/gate_error_rates.py analyse HOST1 --against HOST2     # A/A across two hosts
    python tools/gate_error_rates.py collect DIR --sessions 1 -- benchmarks/test_pretrain.py ARGS  # other

collect runs the suite SESSIONS times, one pytest session after another, into DIR/<label>-NN/ (the
same code and machine: every difference between two A sessions is noise). --slow STRATEGY:PCT
injects LLMBENCH_INJECT_FAULT=STRATEGY:slow=SECONDS, SECONDS being PCT of that strategy's median
step time in the A sessions of --reference: every measured step of it sleeps that long first.

analyse reads every session as `llmbench gate` and `llmbench compare` read a results folder, and
counts, with Clopper-Pearson 95% intervals:

- A/A gate runs: disjoint pairs of A sessions (1 against 2, 3 against 4, ...), each gated at the
  default settings; a gate run fails when any configuration's verdict is REGRESSION (exit 1).
  --pairs all gates every pair (more trials from few sessions, though they share sessions), and
  --against DIR2 every A session of DIR against every one of DIR2 (sessions of another host);
- A/A comparisons: the same pairs through `llmbench compare`: a comparison names a winner when one
  input is marked fastest, not tied;
- A/B gate runs: A session i against B session i: the slowed strategy's tokens/s verdict;
- A/B gate runs at the sessions a side the gate itself recommends for the slowed configuration
  (printed per run as "Sessions a side that catch a 10% slowdown"), where there are that many
  sessions of each: disjoint groups of k A sessions against k B sessions; and A/A gate runs at
  that k: disjoint groups of k A sessions against the next k.

A SIGINT or SIGTERM to collect ends the session running (pytest and what it started) and collect.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _child import run_session
from scipy.stats import binomtest

from llmbench_pytest.analysis.significance import REGRESSION
from llmbench_pytest.report.collect import load_results
from llmbench_pytest.report.compare import Input, compare
from llmbench_pytest.report.gate import GateBounds, run_gate
from llmbench_pytest.report.records import RecordSet, merge_repeats, record_from_result

if TYPE_CHECKING:
    from llmbench_pytest.report.gate import GateResult

REPO = Path(__file__).resolve().parents[1]


def cpu_args(steps: int, seq_lens: str, repeat: int) -> list[str]:
    """A session on this CPU: llama-tiny at one rank, in the pytest process."""
    return [
        "benchmarks/test_pretrain.py",
        "--llmbench-device=cpu",
        "--llmbench-world-sizes=1",
        "--llmbench-launch=inprocess",
        f"--llmbench-steps={steps}",
        "--llmbench-warmup=3",
        f"--llmbench-seq-lens={seq_lens}",
        f"--llmbench-repeat={repeat}",
    ]


def collect(
    out: Path, label: str, sessions: int, strategies: str, slow: str | None, extra: list[str]
) -> None:
    """SESSIONS pytest sessions, one after another, into out/<label>-NN."""
    env = dict(os.environ)
    if slow:
        env["LLMBENCH_INJECT_FAULT"] = slow
        print(f"LLMBENCH_INJECT_FAULT={slow}", flush=True)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *extra,
        f"--llmbench-strategies={strategies}",
        # the checks are not under test here: a noisy run must still be written, not failed
        "--llmbench-max-cv=1",
        "--llmbench-max-repeat-spread=1",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    start = 1 + len(list(out.glob(f"{label}-*")))
    for i in range(start, start + sessions):
        target = out / f"{label}-{i:02d}"
        began = time.monotonic()
        run_session([*cmd, f"--llmbench-results-dir={target}"], cwd=REPO, capture_output=True, env=env)
        load = os.getloadavg()[0]
        print(f"{target}: {time.monotonic() - began:.0f} s, load average {load:.1f}", flush=True)


def slow_spec(specs: str, reference: Path) -> str:
    """'ddp:10%,zero3:25%' -> 'ddp:slow=0.00312,zero3:slow=0.0768': each PCT of that strategy's
    median step time over the A sessions of reference (one B session can slow several strategies,
    each by its own share, as LLMBENCH_INJECT_FAULT takes several specs)."""
    out = []
    for spec in specs.split(","):
        strategy, _, pct = spec.partition(":")
        times = [
            float(r.data["mean_step_time_sec"])
            for folder in sessions_of(reference, "a")
            for r in load_results(folder).runs
            if r.data.get("strategy") == strategy and r.data.get("mean_step_time_sec")
        ]
        if not times:
            raise SystemExit(
                f"--slow {spec}: no {strategy} run in {reference}/a-*; collect the A sessions first"
            )
        seconds = float(pct.rstrip("%")) / 100 * statistics.median(times)
        out.append(f"{strategy}:slow={seconds:.6f}")
    return ",".join(out)


def sessions_of(root: Path, label: str) -> list[Path]:
    return sorted(p for p in root.glob(f"{label}-*") if p.is_dir())


def records(folders: list[Path]) -> RecordSet:
    """The finished runs of these session folders as one side: each folder one session."""
    runs = [r for f in folders for r in load_results(f).runs if r.data.get("status") == "ok"]
    recs = [record_from_result(r.data, str(r.path)) for r in runs]
    return RecordSet(folders[0], "results", merge_repeats(recs))


class Tally:
    """Outcomes of one kind of trial, with the Clopper-Pearson interval of the rate."""

    def __init__(self, what: str) -> None:
        self.what, self.n, self.hits = what, 0, 0

    def add(self, hit: bool) -> None:
        self.n, self.hits = self.n + 1, self.hits + hit

    def line(self) -> str:
        if not self.n:
            return f"  {self.what}: no trials"
        ci = binomtest(self.hits, self.n).proportion_ci(confidence_level=0.95, method="exact")
        rate = self.hits / self.n
        return f"  {self.what}: {self.hits} / {self.n} = {rate:.1%} (95% CI {ci.low:.1%} .. {ci.high:.1%})"


def _verdicts(result: GateResult, strategy: str) -> Counter[str]:
    return Counter(c.verdict for c in result.changes if c.key.strategy == strategy and c.metric == "tokens/s")


def a_a(pairs: list[tuple[Path, Path]], what: str = "A/A") -> list[str]:
    """Each pair of identical-code sessions gated and compared at the default settings."""
    gate, cmp_ = (
        Tally(f"{what} gate runs failed (any REGRESSION)"),
        Tally(f"{what} compare: configurations with a winner"),
    )
    verdicts: Counter[str] = Counter()
    for first, second in pairs:
        base, cur = records([first]), records([second])
        result = run_gate(base, cur, GateBounds())
        gate.add(result.exit_code == 1)
        verdicts.update(c.verdict for c in result.changes if c.metric == "tokens/s")
        comparison = compare([Input("A", base), Input("B", cur)])
        for v in comparison.verdicts().values():
            if v.speed is not None:
                cmp_.add(not v.speed.is_tie)
    return [gate.line(), f"    tokens/s verdicts: {dict(verdicts)}", cmp_.line()]


def pairings(a: list[Path], mode: str, against: list[Path]) -> tuple[list[tuple[Path, Path]], str]:
    """The A/A pairs: disjoint (1-2, 3-4, ...: independent trials), every pair of sessions (more
    trials from few sessions; they share sessions, so the binomial interval is too narrow), or every
    session here against every session of --against (another host's)."""
    if against:
        return list(itertools.product(a, against)), "A/A (every session against --against's)"
    if mode == "all":
        return list(itertools.combinations(a, 2)), "A/A (every pair; pairs share sessions)"
    return list(zip(a[0::2], a[1::2], strict=False)), "A/A"


def a_b(a: list[Path], b: list[Path], strategy: str) -> list[str]:
    one = Tally(f"A/B, 1 session a side: {strategy} tokens/s REGRESSION")
    recommended: list[int | None] = []
    verdicts: Counter[str] = Counter()
    for x, y in zip(a, b, strict=False):
        result = run_gate(records([x]), records([y]), GateBounds())
        v = _verdicts(result, strategy)
        verdicts.update(v)
        one.add(v[REGRESSION] > 0)
        recommended += [
            c.catch for c in result.changes if c.key.strategy == strategy and c.metric == "tokens/s"
        ]
    out = [one.line(), f"    verdicts: {dict(verdicts)}"]
    known = [k for k in recommended if k is not None]
    if not known:
        return [
            *out,
            "  the gate recommended no count (more than 100 sessions a side, or no spread measured)",
        ]
    k = max(set(known), key=known.count)
    out.append(
        f"  sessions a side the gate recommends for {strategy}: {sorted(Counter(known).items())} (used: {k})"
    )
    groups = min(len(a), len(b)) // k
    at_k = Tally(f"A/B, {k} sessions a side: {strategy} tokens/s REGRESSION")
    for g in range(groups):
        side_a, side_b = a[g * k : (g + 1) * k], b[g * k : (g + 1) * k]
        at_k.add(
            _verdicts(run_gate(records(side_a), records(side_b), GateBounds()), strategy)[REGRESSION] > 0
        )
    same = Tally(f"A/A gate runs at {k} sessions a side failed (any REGRESSION)")
    for g in range(len(a) // (2 * k)):
        first, second = a[2 * g * k : (2 * g + 1) * k], a[(2 * g + 1) * k : (2 * g + 2) * k]
        same.add(run_gate(records(first), records(second), GateBounds()).exit_code == 1)
    if not groups:
        return [*out, f"  A/B at {k} sessions a side: not measured ({len(a)} A and {len(b)} B sessions)"]
    return [*out, at_k.line(), same.line()]


def analyse(root: Path, slowed: str, mode: str = "disjoint", against: Path | None = None) -> None:
    a, b = sessions_of(root, "a"), sessions_of(root, "b")
    other = sessions_of(against, "a") if against else []
    print(f"{root}: {len(a)} A sessions, {len(b)} B sessions (slowed: {slowed})")
    print("\n".join(a_a(*pairings(a, mode, other))))
    for strategy in slowed.split(",") if b else []:
        print("\n".join(a_b(a, b, strategy)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    col = sub.add_parser("collect", help="run the suite SESSIONS times into DIR/LABEL-NN")
    col.add_argument("out", type=Path)
    col.add_argument("--label", default="a", help="a: identical code; b: with --slow")
    col.add_argument("--sessions", type=int, default=40)
    col.add_argument("--strategies", default="ddp,zero2")
    col.add_argument(
        "--slow", metavar="STRATEGY:PCT[,...]", help="slow each strategy by PCT of its A step time"
    )
    col.add_argument("--reference", type=Path, help="the folder of the A sessions (default: OUT)")
    col.add_argument("--steps", type=int, default=20, help="measured steps of a CPU session (20)")
    col.add_argument("--seq-lens", default="64", help="sequence lengths of a CPU session (64)")
    col.add_argument("--repeat", type=int, default=1, help="runs of each configuration in a session (1)")
    ana = sub.add_parser("analyse", help="false alarms and power from the sessions in DIR")
    ana.add_argument("root", type=Path)
    ana.add_argument("--pairs", choices=("disjoint", "all"), default="disjoint", help="A/A pairs (disjoint)")
    ana.add_argument(
        "--against", type=Path, help="A/A: every A session here against every one of this folder"
    )
    ana.add_argument("--slowed", default="ddp", help="the strategies the B sessions slowed, comma-separated")
    argv = sys.argv[1:]
    # after --: the pytest arguments of a session (default: a CPU session)
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.pytest_args = pytest_args
    if args.command == "collect":
        slow = slow_spec(args.slow, args.reference or args.out) if args.slow else None
        extra = args.pytest_args or cpu_args(args.steps, args.seq_lens, args.repeat)
        collect(args.out, args.label, args.sessions, args.strategies, slow, extra)
    else:
        analyse(args.root, args.slowed, args.pairs, args.against)


if __name__ == "__main__":
    main()
