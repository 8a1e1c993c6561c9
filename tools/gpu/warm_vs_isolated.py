"""Warm ranks against a fresh group per configuration: do they measure the same thing?

    python tools/gpu/warm_vs_isolated.py                                   # default small matrix
    python tools/gpu/warm_vs_isolated.py --rounds 2 --out /tmp/wvi -- --llmbench-strategies=ddp,fsdp,zero2
    python tools/gpu/warm_vs_isolated.py --rounds 3 --warm-first ddp -- --llmbench-strategies=zero3

Runs `pytest benchmarks/test_pretrain.py` with the same options twice per round: once with warm
ranks (the default: one torchrun group serves every configuration of a world size) and once with
--llmbench-isolate (a fresh group per configuration), alternating which goes first so drift on the
machine hits both. Then, per configuration, compares the medians over rounds of tokens/s (within
1%), peak allocated and peak reserved GPU memory (within 2%), and the measured model states
(to 0.01%). Prints a table and a verdict line per figure, writes the figures as JSON beside the
results; exit status 1 when a figure is outside its bound: the evidence that warm ranks read as
if fresh. A SIGINT or SIGTERM to this tool ends the session running (pytest and its
ranks) and the tool.

Where one call cannot hold both halves (a device call has a time limit), run them apart into one
--out and compare at the end; the isolated half may be split by strategy too:

    python tools/gpu/warm_vs_isolated.py --rounds 1 --only warm --out DIR
    python tools/gpu/warm_vs_isolated.py --rounds 1 --only isolated --out DIR -- --llmbench-strategies=ddp
    python tools/gpu/warm_vs_isolated.py --rounds 1 --compare-only --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _child import run_session

from llmbench_pytest.report.collect import find_result_files

DEFAULT = ["--llmbench-strategies=ddp,fsdp,zero2,zero3,zero2_offload"]
# model states: the same census on both sides, to 0.01% (1.5 MB of llama-1b's 15.4 GB); a scalar
# DeepSpeed allocates in one and not the other differs by bytes, a leftover by megabytes or more
BOUNDS = {"tokens_per_sec": 0.01, "peak_vram_gb": 0.02, "peak_reserved_gb": 0.02, "model_state_gb": 1e-4}


def with_first(extra: list[str], first: str) -> list[str]:
    """The session's options with FIRST trained before the strategies they name."""
    named = [a for a in extra if a.startswith("--llmbench-strategies=")]
    if not named:
        sys.exit("--warm-first needs the strategies named: -- --llmbench-strategies=...")
    strategies = named[-1].split("=", 1)[1]
    return [a for a in extra if a not in named] + [f"--llmbench-strategies={first},{strategies}"]


def run(mode: str, out: Path, extra: list[str], warm_first: str | None = None) -> int:
    where = out / mode
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_pretrain.py", "-p", "no:cacheprovider", "-q"]
    if mode.startswith("warm") and warm_first:
        extra = with_first(extra, warm_first)
    cmd += [f"--llmbench-results-dir={where}", *extra]
    if mode.startswith("isolated"):
        cmd.append("--llmbench-isolate")
    print("$", " ".join(cmd), flush=True)
    return run_session(cmd).returncode


def figures(folder: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in find_result_files(folder):
        d = json.loads(path.read_text())
        if d["status"] == "ok":
            key = f"{d['strategy']}-ws{d['world_size']}-seq{d['seq_len']}"
            out[key] = {k: d.get(k) for k in BOUNDS} | {"ranks": d["timing"]["launch"]["ranks"]}
    return out


def compare(out: Path, rounds: int) -> tuple[list[dict[str, Any]], bool]:
    warm = [figures(out / f"warm{r}") for r in range(rounds)]
    iso = [figures(out / f"isolated{r}") for r in range(rounds)]
    rows, ok = [], True
    for key in sorted(set.intersection(*(set(f) for f in warm + iso))):  # a --warm-first strategy: warm only
        row: dict[str, Any] = {"config": key}
        for name, bound in BOUNDS.items():
            w = [f[key][name] for f in warm if f[key][name] is not None]
            i = [f[key][name] for f in iso if f[key][name] is not None]
            if not w or not i:
                continue
            a, b = statistics.median(w), statistics.median(i)
            diff = (a - b) / b if b else 0.0
            within = abs(diff) <= bound + 1e-12
            ok &= within
            row[name] = {"warm": a, "isolated": b, "diff": diff, "bound": bound, "within": within}
        rows.append(row)
    return rows, ok


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="warm and isolated sessions each (2)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/llmbench/warm_vs_isolated"))
    parser.add_argument("--only", choices=("warm", "isolated"), help="run only this half's sessions")
    parser.add_argument(
        "--warm-first",
        metavar="STRATEGY",
        help="the warm sessions train STRATEGY first (left out of the comparison), so that the first "
        "strategy compared runs on ranks that already trained one: without it, the warm session's "
        "first configuration starts fresh ranks like the isolated one",
    )
    parser.add_argument(
        "--compare-only", action="store_true", help="run nothing: compare the sessions already in --out"
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then options for both sessions")
    args = parser.parse_args()
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    extra = extra or DEFAULT
    codes = [0]
    for r in range(0 if args.compare_only else args.rounds):
        order = ("warm", "isolated") if r % 2 == 0 else ("isolated", "warm")
        for mode in order:
            if args.only in (None, mode):
                codes.append(run(f"{mode}{r}", args.out, extra, args.warm_first))
    if args.only:
        return max(codes)  # pytest's own status: a failed check in this half shows here
    rows, ok = compare(args.out, args.rounds)
    for row in rows:
        cells = [row["config"]]
        for name in BOUNDS:
            c = row.get(name)
            if c:
                flag = "" if c["within"] else " OUTSIDE"
                cells.append(f"{name} {c['warm']:.6g} vs {c['isolated']:.6g} ({c['diff']:+.2%}){flag}")
        print("  ".join(cells))
    if not rows:
        print("no configuration finished ok both ways: nothing to compare")
        ok = False
    print("warm and isolated agree within the bounds" if ok else "warm and isolated DISAGREE (see OUTSIDE)")
    (args.out / "warm_vs_isolated.json").write_text(
        json.dumps({"bounds": BOUNDS, "rows": rows, "ok": ok}, indent=2)
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
