"""Out-of-sample check of the scale prediction (llmbench_pytest/plan/scale.py).

    python tools/scale_validation.py RESULTS_DIR [RESULTS_DIR ...] [--target 2] [--kept other.json ...]
        [--json out.json] [--markdown out.md]

For every configuration RESULTS_DIR holds at the target world size (default 2) and at world size 1:
predict the target from every smaller world size measured (1, or 1 and 2 for a target of 4: the
miss at the largest one carried) and the link probe of those smaller runs alone, so that no timing
or link figure of the target's own runs enters the prediction; then compare with the measured
step. The model's collective schedule is checked against what the target's profiled steps recorded
(bus bytes per step). `--kept` names a JSON this tool wrote earlier (on another host, from its 1- and
2-GPU runs): its predictions at the target are compared with the same measured steps, so a
prediction made before a larger host was at hand is checked too. Then, from every run up to the
target, the predictions at the next sizes of one node (up to 8) are written for a larger host to
check. Prints a markdown table and the shares within 5% and 10%.

Several RESULTS_DIRs (sessions on different hosts) are each checked on their own, with their own
link probe, then pooled: the shares over all of them, and apart for the predictions that raised a
flag (plan/scale.py: inputs known worse than +-5%, a host-bound step that waits for gathers, dense
gathers) and
those that did not, which says whether the prediction knows when it is unsure.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmbench_pytest.plan.network import Fabric, widest_sweep
from llmbench_pytest.plan.scale import bus_bytes, predict_config, schedule
from llmbench_pytest.plan.scale_command import group
from llmbench_pytest.report.collect import ReportError, load_results

NODE = 8
"""The GPUs of the node the predictions ahead assume (the larger hosts the issues check)."""


def kept_predictions(paths: list[str], target: int) -> dict[str, float]:
    """configuration -> the step time the kept validation files predicted at `target` GPUs."""
    kept = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        ahead = doc.get("predictions_ahead") or doc.get("predictions_ws4_ws8") or []
        for c in ahead:
            for p in c["predictions"]:
                if p["world_size"] == target and not p.get("measured"):
                    kept[c["configuration"]] = p["step_sec"]
    return kept


def validate(name: str, by_ws: dict[int, dict[str, Any]], target: int, node: Fabric) -> dict[str, Any]:
    """One configuration's row: the target predicted from its smaller runs, against the measured."""
    sizes = [w for w in sorted(by_ws) if w < target]
    scaled = predict_config(name, [by_ws[w] for w in sizes], [target], node)
    predicted = next(p for p in scaled.predictions if p.world_size == target)
    run = by_ws[target]
    measured = float(run["mean_step_time_sec"])
    comm = run.get("communication") or {}
    return {
        "configuration": name,
        "from_world_sizes": sizes,
        "ws1_step_sec": float(by_ws[1]["mean_step_time_sec"]),
        "predicted_step_sec": predicted.step_sec,
        "measured_step_sec": measured,
        "error": predicted.step_sec / measured - 1,
        "measured_interval": (run.get("step_time_mean_interval") or {}).get("relative"),
        "predicted_exposed_sec": predicted.exposed_sec,
        "measured_exposed_share": comm.get("exposed_fraction_of_step"),
        "model_bus_bytes": bus_bytes(schedule(by_ws[1]), target),
        "measured_bus_bytes": comm.get("bus_bytes_per_step"),
        "flags": scaled.flags,
    }


FLAG_NAMES = {
    "known only to": "inputs loose",
    "host-bound": "host-bound",
    "dense gathers": "dense gathers",
    "misses the measured": "model missed",
    "moved": "bytes differ",
}
"""Short names for the table of the flags plan/scale.py writes out in full (the JSON keeps them)."""


def flag_names(flags: list[str]) -> list[str]:
    return [next((short for key, short in FLAG_NAMES.items() if key in f), "flagged") for f in flags]


def table(rows: list[dict[str, Any]], target: int) -> list[str]:
    kept = any("kept_error" in r for r in rows)
    head = f"| configuration | ws1 step s | predicted ws{target} | measured ws{target} | error |"
    head += " kept prediction | kept error |" if kept else ""
    head += " bytes model / measured | flags |"
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        mb = r["measured_bus_bytes"]
        bytes_cell = f"{r['model_bus_bytes'] / 1e9:.3f} / {mb / 1e9:.3f} GB" if mb else "-"
        line = (
            f"| {r['configuration']} | {r['ws1_step_sec']:.4f} | {r['predicted_step_sec']:.4f} | "
            f"{r['measured_step_sec']:.4f} | {r['error']:+.1%} |"
        )
        if kept:
            line += (
                f" {r['kept_step_sec']:.4f} | {r['kept_error']:+.1%} |" if "kept_error" in r else " - | - |"
            )
        lines.append(f"{line} {bytes_cell} | {', '.join(flag_names(r['flags'])) or '-'} |")
    return lines


def _within(errors: list[float], band: float) -> int:
    return sum(abs(e) <= band for e in errors)


def shares(rows: list[dict[str, Any]], key: str, what: str) -> str:
    judged = [r[key] for r in rows if key in r]
    if not judged:
        return ""
    within = {b: _within(judged, b) for b in (0.05, 0.10)}
    return (
        f"{what}, {len(judged)} configurations: {within[0.05]} ({within[0.05] / len(judged):.0%}) within 5%, "
        f"{within[0.10]} ({within[0.10] / len(judged):.0%}) within 10%"
    )


class NoRuns(Exception):
    """A folder without what the check needs (its message says what)."""


def validate_folder(folder: str, target: int, kept: dict[str, float]) -> dict[str, Any]:
    """One session's folder: its rows, the predictions ahead, and the probes they used."""
    runs = load_results(Path(folder)).runs
    # the link as the smaller runs measured it: the target's own probe would be in sample, except at
    # 2, whose 1-GPU runs have none (the probe needs two ranks); the predictions ahead use every
    # run up to the target, its probe too
    up_to = [r.data for r in runs if int(r.data.get("world_size") or 1) <= target]
    widest = widest_sweep(up_to)
    below = widest_sweep(d for d in up_to if int(d.get("world_size") or 1) < target)
    sweep = widest if target == 2 and below is None else below
    if sweep is None:
        raise NoRuns(f"no link probe in the runs below world size {target}")
    node = Fabric(sweep, gpus_per_node=NODE)
    node_ahead = Fabric(widest, gpus_per_node=NODE)
    rows, ahead = [], []
    sizes_ahead = [n for n in (4, 8) if n > target and n <= NODE]
    for name, members in sorted(group(runs).items()):
        by_ws = {int(m["world_size"]): m for m in members if int(m["world_size"]) <= target}
        if 1 not in by_ws or target not in by_ws:
            continue
        row = validate(name, by_ws, target, node)
        if name in kept:
            row["kept_step_sec"] = kept[name]
            row["kept_error"] = kept[name] / row["measured_step_sec"] - 1
        rows.append(row)
        if sizes_ahead:
            ahead.append(predict_config(name, list(by_ws.values()), sizes_ahead, node_ahead).to_dict())
    if not rows:
        raise NoRuns(f"no configuration was run at both world sizes 1 and {target}")
    return {
        "rows": rows,
        "ahead": ahead,
        "probe": sweep.get("world_size"),
        "probe_ahead": widest.get("world_size"),
    }


def pooled(rows: list[dict[str, Any]], target: int) -> list[str]:
    """The shares over every folder's rows, and over those the prediction raised no flag for: a
    flag (inputs known worse than +-5%, a host-bound step waiting for gathers, dense gathers) is the
    prediction saying it is unsure, so the two shares tell whether it knows when it is."""
    quiet = [r for r in rows if not r["flags"]]
    lines = [
        shares(rows, "error", f"world size {target} predicted, all folders"),
        shares(quiet, "error", "of them with no flag on the prediction"),
        shares([r for r in rows if r["flags"]], "error", "of them flagged"),
    ]
    return [line for line in lines if line]


def spread(rows: list[dict[str, Any]]) -> list[str]:
    """Per configuration seen in three folders or more: how much its measured steps at world size 1
    and at the target vary from one session (host) to the next, beside the prediction's errors. Where
    the errors spread as the two measurements do, the prediction is as close as the measurements
    let it be; a mean error well off zero with a small spread is the model's own bias."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["configuration"], []).append(r)
    lines = [
        "| configuration | sessions | ws1 step CV | target step CV | both | mean error | error SD "
        "| within 5% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in sorted(by.items()):
        if len(rs) < 3:
            continue
        cv = [statistics.stdev(v) / statistics.mean(v) for v in
              ([r["ws1_step_sec"] for r in rs], [r["measured_step_sec"] for r in rs])]  # fmt: skip
        errors = [r["error"] for r in rs]
        lines.append(
            f"| {name} | {len(rs)} | {cv[0]:.1%} | {cv[1]:.1%} | {math.hypot(*cv):.1%} | "
            f"{statistics.mean(errors):+.1%} | {statistics.stdev(errors):.1%} | "
            f"{_within(errors, 0.05)} of {len(rs)} |"
        )
    return lines if len(lines) > 2 else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "results_dirs",
        nargs="+",
        metavar="RESULTS_DIR",
        help="one session's result folder; several: each checked on its own, then pooled",
    )
    ap.add_argument("--target", type=int, default=2, help="the world size predicted and compared (default 2)")
    ap.add_argument(
        "--kept",
        action="append",
        default=[],
        help="a JSON this tool wrote on another host: its predictions at --target are compared too",
    )
    ap.add_argument("--json", help="write the table and the predictions ahead here")
    ap.add_argument("--markdown", help="write the table here as well")
    args = ap.parse_args()
    if args.target < 2:
        ap.error("--target must be 2 or more: world size 1 is what the prediction starts from")
    kept = kept_predictions(args.kept, args.target)
    several = len(args.results_dirs) > 1
    done: dict[str, dict[str, Any]] = {}
    for folder in args.results_dirs:
        try:
            done[folder] = validate_folder(folder, args.target, kept)
        except (NoRuns, ReportError) as exc:  # a folder that is missing or holds no run: its message
            print(f"{folder}: {exc}" if several else exc, file=sys.stderr)
            if not several:
                return 2
    if not done:
        return 2
    lines, summary, rows = [], [], []
    for folder, got in done.items():
        for row in got["rows"]:
            row["folder"] = folder
        rows.extend(got["rows"])
        lines += [f"### {folder}", ""] if several else []
        here = f"in {folder}" if several else "here"
        mine = [shares(got["rows"], "error", f"world size {args.target} predicted {here}")]
        if kept:
            where = ", ".join(args.kept)
            mine.append(shares(got["rows"], "kept_error", f"world size {args.target} predicted in {where}"))
        summary += [line for line in mine if line]
        lines += [*table(got["rows"], args.target), "", *(line for line in mine if line), ""]
    if several:
        pooled_lines = pooled(rows, args.target)
        summary += pooled_lines
        lines += ["### pooled", "", *pooled_lines]
        if table_of_spread := spread(rows):
            lines += ["", "### the same configuration from one session to the next", "", *table_of_spread]
    text = "\n".join(lines).rstrip()
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        first = next(iter(done.values()))
        doc = {
            "target_world_size": args.target,
            "link_probe_world_size": first["probe"],
            "link_probe_world_size_ahead": first["probe_ahead"],
            "validation": rows,
            "summary": summary,
            "predictions_ahead": [c for got in done.values() for c in got["ahead"]],
        }
        if several:
            doc["folders"] = {f: {"link_probe_world_size": g["probe"]} for f, g in done.items()}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
