"""Out-of-sample check of the scale prediction (llmbench_pytest/plan/scale.py): its points and its 90%
intervals, on the GPUs present and, beyond one node, against published multi-node runs.

    python tools/scale_validation.py RESULTS_DIR [RESULTS_DIR ...] [--target 2] [--kept other.json ...]
        [--json out.json] [--markdown out.md]
    python tools/scale_validation.py --pooled [--published FILE] [--calibrate PATH] [--json] [--markdown]

For every configuration RESULTS_DIR holds at the target world size (default 2) and at world size 1:
predict the target from every smaller world size measured (1, or 1 and 2 for a target of 4: the
miss at the largest one carried) and the link probe of those smaller runs alone, so that no timing
or link figure of the target's own runs enters the prediction; then compare with the measured
step, and say whether it lies inside the prediction's 90% interval and how wide that is. The
model's collective schedule is checked against what the target's profiled steps recorded (bus
bytes per step). `--kept` names a JSON this tool wrote earlier (on another host): its predictions
at the target are compared with the same measured steps. Then, from every run up to the target,
the predictions at the next sizes of one node (up to 8) are written for a larger host to check.

A RESULTS_DIR may be a .tgz, .tar.gz or .tar.xz of result folders, or ARCHIVE:FOLDER for one
folder inside it (read from a temporary copy).

Several RESULTS_DIRs (sessions on different hosts) are each checked on their own, with their own
link probe, then pooled. Given RESULTS_DIRs take the package's intervals (plan/scale_calibration.py):
out of sample for sessions it never saw; a kept session among them is named as in sample. `--pooled`
checks the kept sessions of docs/results (SESSIONS), each with intervals from the other sessions'
errors and spreads alone, and again each model with the other models' alone: world size 2 from 1,
4 from 1 and 2 (anchored), and 4 from 1 alone (two doublings); `--published` adds the published
multi-node points (tools/scale_published.py); `--calibrate PATH` writes what the package's intervals
take (plan/scale_calibration.py) from all of it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scale_published

from llmbench_pytest.plan.interval import (
    CLASSES,
    Calibration,
    class_host_cv,
    host_per_step,
    log_error,
    step_cv,
)
from llmbench_pytest.plan.network import Fabric, widest_sweep
from llmbench_pytest.plan.scale import predict_config
from llmbench_pytest.plan.scale_command import group
from llmbench_pytest.plan.step_model import Model, bus_bytes, schedule
from llmbench_pytest.report.collect import ReportError, load_results

REPO = Path(__file__).resolve().parents[1]
NODE = 8
"""The GPUs of the node the predictions ahead assume (the larger hosts the issues check)."""
STEADY_REPEAT = 0.025
"""A configuration whose steps repeat within this from host to host (both world sizes, three
sessions or more on one GPU model) is held to the point goal: within 5% for 80%, 10% for all."""
SESSIONS = [
    "2026-11-27-h200x2-many-gpus/runs-host1",
    "2026-11-27-h200x2-many-gpus/runs-host2",
    "2026-11-27-h200x2-overlap/runs-host3",
    "2026-11-27-h200x2-overlap/runs-host4",
    "2026-11-27-h200x2-side-by-side/runs/pretrain-side-by-side",
    "2026-11-27-h200x2-side-by-side/runs/pretrain-final-side-by-side",
    "2026-11-27-h200x2-side-by-side/runs/rest-side-by-side",
    "2026-11-27-h200x4-four-gpus/runs/pretrain",
    "2026-11-27-h200x4-four-gpus/runs/rest",
    "2026-11-27-h200x2-suite-after-eta/runs-pretrain.tgz",
    "2026-11-27-h200x2-suite-after-eta/runs-rest.tgz",
    "2026-11-27-h100x4-side-by-side/runs-p4.tgz",
    "2026-11-27-h200x4-suite-side-by-side/runs.tar.xz:pretrain",
    "2026-11-27-h200x4-suite-side-by-side/runs.tar.xz:rest",
    "2026-11-27-h200x4-suite-side-by-side/runs.tar.xz:alone",
    "2026-11-28-h200x4-off-default/runs-offdef.tgz",
    "2026-11-28-h200x4-off-default/runs-offdef3.tgz",
    "2026-11-28-h200x2-off-default/od1.tgz",
    "2026-11-28-h200x2-off-default/od2.tgz",
]
"""The kept multi-GPU sessions with a link probe, under docs/results (the 2026-11-22 2x H200 runs
predate the probe)."""
PUBLISHED = "docs/results/2026-11-28-scale-published/published.json"
KEPT = [f"docs/results/{s}" for s in SESSIONS]


def _split(spec: str) -> tuple[str, str]:
    """(folder or archive, member inside an archive or '') of a RESULTS_DIR spec."""
    if any(x in spec for x in (".tgz:", ".tar.gz:", ".tar.xz:")):
        path, _, member = spec.partition(":")
        return path, member
    return spec, ""


def _located(path: str) -> Path:
    """The path as given, or from the repository's root where only that exists (the kept sessions
    are named from there)."""
    p = Path(path)
    return REPO / p if not p.exists() and (REPO / p).exists() else p


def _resolved(spec: str) -> str:
    """A folder's spec as one absolute path (an archive's member kept after ':'), named from the
    repository's root or from here alike."""
    path, member = _split(spec)
    whole = str(_located(path).resolve())
    return f"{whole}:{member}" if member else whole


def kept_among(specs: list[str]) -> list[str]:
    """The specs that are, or hold, a kept session (the session itself, its archive, or a folder
    above it): the package's calibration saw them."""
    kept = [_resolved(k) for k in KEPT]

    def holds(mine: str, k: str) -> bool:
        return k == mine or _split(k)[0] == mine or k.startswith(mine.rstrip("/") + "/")

    return [spec for spec in specs if any(holds(_resolved(spec), k) for k in kept)]


class NoRuns(Exception):
    """A folder without what the check needs (its message says what)."""


def open_folder(spec: str, stack: contextlib.ExitStack) -> Path:
    """A results folder, an archive of them, or ARCHIVE:FOLDER, as a folder on disk."""
    path, member = _split(spec)
    p = _located(path)
    if not p.name.endswith((".tgz", ".tar.gz", ".tar.xz")):
        return p
    if not p.is_file():
        raise NoRuns(f"{p} does not exist")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scale-validation-")))
    with tarfile.open(p) as tar:
        tar.extractall(tmp, filter="data")
    return tmp / member if member else tmp


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


def validate(
    name: str, by_ws: dict[int, dict[str, Any]], target: int, node: Fabric, sizes: list[int] | None = None,
    calibration: Calibration | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One configuration's row: the target predicted from `sizes` (default every smaller run), against
    the measured, with the prediction's interval from `calibration` (default the package's)."""
    sizes = sizes or [w for w in sorted(by_ws) if w < target]
    runs = [by_ws[w] for w in sizes]
    scaled = predict_config(name, runs, [target], node, calibration)
    predicted = next(p for p in scaled.predictions if p.world_size == target)
    run = by_ws[target]
    measured = float(run["mean_step_time_sec"])
    comm = run.get("communication") or {}
    model = Model(runs[0], node)
    anchor = max(sizes) if max(sizes) > 1 else 1
    assert predicted.step_low is not None and predicted.step_high is not None
    return {
        "configuration": name,
        "model": runs[0].get("model"),
        "gpu": runs[0].get("gpu_name"),
        "class": scaled.klass,
        "from_world_sizes": sizes,
        "target": target,
        "ws1_step_sec": float(by_ws[1]["mean_step_time_sec"]),
        "ws1_step_cv": step_cv(by_ws[1]),
        "predicted_step_sec": predicted.step_sec,
        "measured_step_sec": measured,
        "error": predicted.step_sec / measured - 1,
        "log_error": log_error(predicted.step_sec, measured),
        "interval": [predicted.step_low, predicted.step_high],
        "inside": predicted.step_low <= measured <= predicted.step_high,
        "width": (predicted.step_high - predicted.step_low) / predicted.step_sec,
        "slowest_rank_sec": model.wait(target) - model.wait(anchor),
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
    head = (
        f"| configuration | ws1 step s | predicted ws{target} | 90% interval | measured ws{target} | error |"
    )
    head += " inside |" + (" kept prediction | kept error |" if kept else "")
    head += " bytes model / measured | class | flags |"
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        mb = r["measured_bus_bytes"]
        bytes_cell = f"{r['model_bus_bytes'] / 1e9:.3f} / {mb / 1e9:.3f} GB" if mb else "-"
        lo, hi = r["interval"]
        line = (
            f"| {r['configuration']} | {r['ws1_step_sec']:.4f} | {r['predicted_step_sec']:.4f} | "
            f"{lo:.4f}-{hi:.4f} | {r['measured_step_sec']:.4f} | {r['error']:+.1%} | "
            f"{'yes' if r['inside'] else '**no**'} |"
        )
        if kept:
            line += (
                f" {r['kept_step_sec']:.4f} | {r['kept_error']:+.1%} |" if "kept_error" in r else " - | - |"
            )
        lines.append(f"{line} {bytes_cell} | {r['class']} | {', '.join(flag_names(r['flags'])) or '-'} |")
    return lines


def _within(errors: list[float], band: float) -> int:
    return sum(abs(e) <= band for e in errors)


def shares(rows: list[dict[str, Any]], key: str, what: str) -> str:
    judged = [r[key] for r in rows if key in r]
    if not judged:
        return ""
    within = {b: _within(judged, b) for b in (0.05, 0.10)}
    text = (
        f"{what}, {len(judged)} configurations: {within[0.05]} ({within[0.05] / len(judged):.0%}) within 5%, "
        f"{within[0.10]} ({within[0.10] / len(judged):.0%}) within 10%"
    )
    if key == "error":
        inside = sum(r["inside"] for r in rows)
        width = statistics.median(r["width"] for r in rows)
        text += f"; inside the 90% interval {inside} ({inside / len(rows):.0%}), median width {width:.1%}"
    return text


def folder_fabrics(runs: list[Any], target: int) -> tuple[Fabric, Fabric, int, int]:
    """The link as the smaller runs measured it (the target's own probe would be in sample, except at
    2, whose 1-GPU runs have none: the probe needs two ranks), and for the predictions ahead every
    run's up to the target."""
    up_to = [r.data for r in runs if int(r.data.get("world_size") or 1) <= target]
    widest = widest_sweep(up_to)
    below = widest_sweep(d for d in up_to if int(d.get("world_size") or 1) < target)
    sweep = widest if target == 2 and below is None else below
    if sweep is None or widest is None:
        raise NoRuns(f"no link probe in the runs below world size {target}")
    return (
        Fabric(sweep, gpus_per_node=NODE),
        Fabric(widest, gpus_per_node=NODE),
        sweep["world_size"],
        widest["world_size"],
    )


def validate_folder(
    folder: Path, target: int, kept: dict[str, float], sizes: list[int] | None = None
) -> dict[str, Any]:
    """One session's folder: its rows, the predictions ahead, and the probes they used."""
    runs = load_results(folder).runs
    node, node_ahead, probe, probe_ahead = folder_fabrics(runs, target)
    rows, ahead, inputs = [], [], {}
    sizes_ahead = [n for n in (4, 8) if n > target and n <= NODE]
    for name, members in sorted(group(runs).items()):
        by_ws = {int(m["world_size"]): m for m in members if int(m["world_size"]) <= target}
        if 1 not in by_ws or target not in by_ws or (sizes and not set(sizes) <= set(by_ws)):
            continue
        row = validate(name, by_ws, target, node, sizes)
        if name in kept:
            row["kept_step_sec"] = kept[name]
            row["kept_error"] = kept[name] / row["measured_step_sec"] - 1
        rows.append(row)
        inputs[name] = (by_ws, node, sizes)
        if sizes_ahead and not sizes:
            ahead.append(predict_config(name, list(by_ws.values()), sizes_ahead, node_ahead).to_dict())
    if not rows:
        raise NoRuns(f"no configuration was run at both world sizes 1 and {target}")
    return {"rows": rows, "ahead": ahead, "probe": probe, "probe_ahead": probe_ahead, "inputs": inputs}


def calibration_from(rows: list[dict[str, Any]], date: str = "") -> dict[str, Any]:
    """What the package's intervals take, from validation rows (plan/interval.py): the errors of
    one doubling by class (world size 2 from 1; 4 anchored at 2), the hosts' spread of each
    configuration's 1-GPU step on its GPU, each class's median spread, and the ratio of the hosts'
    spread to a run's own step CV (host_per_step) for configurations never seen."""
    errors: dict[str, dict[str, list[float]]] = {"from_smallest": {}, "anchored": {}}
    for r in rows:
        sizes = r["from_world_sizes"]
        kind = (
            "from_smallest" if sizes == [1] and r["target"] == 2 else "anchored" if len(sizes) > 1 else None
        )
        if kind and r["target"] == 2 * max(sizes):
            errors[kind].setdefault(r["class"], []).append(round(r["log_error"], 5))
    steps: dict[str, dict[str, float]] = {}
    step_cvs: dict[str, dict[str, float]] = {}
    class_of: dict[str, str] = {}
    for r in rows:
        key = f"{r['configuration']} | {r['gpu'] or 'cpu'}"
        steps.setdefault(key, {})[r["folder"]] = r["ws1_step_sec"]
        step_cvs.setdefault(key, {})[r["folder"]] = r["ws1_step_cv"]
        class_of[key] = r["class"]
    host_cv = {
        key: {"cv": round(statistics.stdev(v) / statistics.mean(v), 5), "sessions": len(v)}
        for key, by in sorted(steps.items())
        if len(v := list(by.values())) >= 2
    }
    return {
        "date": date,
        "errors": errors,
        "host_cv": host_cv,
        "class_host_cv": class_host_cv(host_cv, class_of),
        "host_per_step": round(host_per_step(host_cv, {k: list(v.values()) for k, v in step_cvs.items()}), 4),
    }


def steady_configurations(rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(configuration, GPU) whose 1-GPU and target steps each repeat within STEADY_REPEAT over three
    sessions or more."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["configuration"], r["gpu"]), []).append(r)
    steady = set()
    for key, rs in by.items():
        if len({r["folder"] for r in rs}) < 3:
            continue
        cvs = [statistics.stdev(v) / statistics.mean(v) for v in
               ([r["ws1_step_sec"] for r in rs], [r["measured_step_sec"] for r in rs])]  # fmt: skip
        if max(cvs) <= STEADY_REPEAT:
            steady.add(key)
    return steady


def coverage(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many predictions, how many inside their interval, and the intervals' median width."""
    return {
        "predictions": len(rows),
        "inside": sum(r["inside"] for r in rows),
        "median_width": statistics.median(r["width"] for r in rows),
    }


def check_summary(rows: list[dict[str, Any]], sessions: int, devices: str) -> dict[str, Any]:
    """The figures the band text quotes (plan/interval.band_text)."""
    steady = steady_configurations([r for r in rows if r["target"] == 2])
    held = [r for r in rows if (r["configuration"], r["gpu"]) in steady]
    errors = [r["error"] for r in held]
    return {
        "method": "each session's intervals from the other sessions' errors and spreads",
        "sessions": sessions,
        "devices": devices,
        **coverage(rows),
        "by_class": {
            k: coverage(rs)
            for k in sorted({r["class"] for r in rows})
            if (rs := [r for r in rows if r["class"] == k])
        },
        "steady": {
            "repeat": STEADY_REPEAT,
            "configurations": len(steady),
            "count": len(held),
            "within_5": _within(errors, 0.05),
            "within_10": _within(errors, 0.10),
        }
        if held
        else None,
    }


def slowest_rank_effect(rows: list[dict[str, Any]]) -> list[str]:
    """For each class, world size 2 from 1: the median error with the slowest-rank term and without."""
    lines = [
        "| class | predictions | median error | without the slowest rank | median term |",
        "|---|---|---|---|---|",
    ]
    for k in sorted({r["class"] for r in rows}):
        rs = [r for r in rows if r["class"] == k and r["from_world_sizes"] == [1] and r["target"] == 2]
        if not rs:
            continue
        without = [(r["predicted_step_sec"] - r["slowest_rank_sec"]) / r["measured_step_sec"] - 1 for r in rs]
        term = [r["slowest_rank_sec"] / r["measured_step_sec"] for r in rs]
        lines.append(
            f"| {k} | {len(rs)} | {statistics.median(r['error'] for r in rs):+.1%} | "
            f"{statistics.median(without):+.1%} | {statistics.median(term):.1%} of the step |"
        )
    return lines


def spread(rows: list[dict[str, Any]]) -> list[str]:
    """Per configuration seen in three folders or more: how much its measured steps at world size 1
    and at the target vary from one session (host) to the next, beside the prediction's errors."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(f"{r['configuration']} ({r['gpu']})", []).append(r)
    lines = [
        "| configuration | sessions | ws1 step CV | target step CV | both | mean error | error SD "
        "| within 5% | inside 90% |",
        "|---|---|---|---|---|---|---|---|---|",
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
            f"{_within(errors, 0.05)} of {len(rs)} | {sum(r['inside'] for r in rs)} of {len(rs)} |"
        )
    return lines if len(lines) > 2 else []


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "results_dirs",
        nargs="*",
        metavar="RESULTS_DIR",
        help="one session's result folder (or archive); several: each checked on its own, then pooled",
    )
    ap.add_argument("--target", type=int, default=2, help="the world size predicted and compared (default 2)")
    ap.add_argument(
        "--kept",
        action="append",
        default=[],
        help="a JSON this tool wrote on another host: its predictions at --target are compared too",
    )
    ap.add_argument(
        "--pooled", action="store_true", help="check the kept sessions of docs/results (SESSIONS)"
    )
    ap.add_argument(
        "--published", metavar="FILE", help=f"check the published multi-node points too ({PUBLISHED})"
    )
    ap.add_argument("--calibrate", metavar="PATH", help="write the package's calibration module here")
    ap.add_argument("--json", help="write the table and the predictions ahead here")
    ap.add_argument("--markdown", help="write the table here as well")
    args = ap.parse_args()
    if args.target < 2:
        ap.error("--target must be 2 or more: world size 1 is what the prediction starts from")
    if not args.results_dirs and not args.pooled:
        ap.error("give RESULTS_DIR(s), or --pooled for the kept sessions")
    if args.calibrate and not args.pooled:
        ap.error("--calibrate writes the package's calibration: it needs --pooled (every kept session)")
    return args


def run_folders(specs: list[str], plan: list[tuple[int, list[int] | None]], kept: dict[str, float],
                stack: contextlib.ExitStack) -> dict[str, dict[str, Any]]:  # fmt: skip
    """{folder + what was checked: its result} for each folder and (target, from sizes) in `plan`;
    a folder that is missing or holds nothing to check is named on stderr."""
    done: dict[str, dict[str, Any]] = {}
    for spec in specs:
        for target, sizes in plan:
            try:
                got = validate_folder(open_folder(spec, stack), target, kept, sizes)
            except (NoRuns, ReportError) as exc:
                if len(plan) == 1:  # a pooled plan skips what a 2-GPU session has no 4 for, quietly
                    print(f"{spec}: {exc}" if len(specs) > 1 else exc, file=sys.stderr)
                continue
            for row in got["rows"]:
                row["folder"] = spec
            what = f"{spec}, world size {target} from {sizes or 'every smaller'}"
            done[spec if len(plan) == 1 else what] = got
    return done


def report(
    done: dict[str, dict[str, Any]], args: argparse.Namespace, kept: dict[str, float]
) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    lines, summary, rows = [], [], []
    several = len(done) > 1
    for key, got in done.items():
        rows.extend(got["rows"])
        target = got["rows"][0]["target"]
        lines += [f"### {key}", ""] if several else []
        here = f"in {key}" if several else "here"
        mine = [shares(got["rows"], "error", f"world size {target} predicted {here}")]
        if kept:
            mine.append(
                shares(got["rows"], "kept_error", f"world size {target} predicted in {', '.join(args.kept)}")
            )
        summary += [line for line in mine if line]
        lines += [*table(got["rows"], target), "", *(line for line in mine if line), ""]
    return lines, summary, rows


def main() -> int:
    args = arguments()
    kept = kept_predictions(args.kept, args.target)
    specs = KEPT if args.pooled else args.results_dirs
    plan: list[tuple[int, list[int] | None]] = (
        [(2, None), (4, [1, 2]), (4, [1])] if args.pooled else [(args.target, None)]
    )
    with contextlib.ExitStack() as stack:
        done = run_folders(specs, plan, kept, stack)
        if not done:
            return 2
        sessions = {r["folder"] for got in done.values() for r in got["rows"]}
        # the kept sessions are checked leaving each out (--pooled); any other folders keep the
        # package's intervals: out of sample for a session it never saw, named where it saw one
        in_sample = [] if args.pooled else kept_among(specs)
        if in_sample:
            print(
                f"in sample: the package's intervals were calibrated on {', '.join(in_sample)}",
                file=sys.stderr,
            )
        unseen_models = None
        if len(sessions) > 1 and args.pooled:
            unseen_models = leave_one_out(done, model_of)
            # each session's intervals from the others alone: the check out of sample, in every table
            again = iter(leave_one_out(done))
            for got in done.values():
                got["rows"] = [next(again) for _ in got["rows"]]
        lines, summary, rows = report(done, args, kept)
        if len(sessions) > 1:
            pooled = pooled_lines(rows)
            summary += pooled
            how = (
                "each session's intervals from the other sessions"
                if args.pooled
                else "the package's intervals (plan/scale_calibration.py: the kept sessions, "
                + (f"in sample for {', '.join(in_sample)})" if in_sample else "none of these)")
            )
            lines += [f"### pooled, {how}", "", *pooled]
            lines += ["", "### the slowest of N ranks (world size 2 from 1)", "", *slowest_rank_effect(rows)]
            if table_of_spread := spread([r for r in rows if r["target"] == 2]):
                lines += [
                    "",
                    "### the same configuration from one session to the next (world size 2)",
                    "",
                    *table_of_spread,
                ]
        if unseen_models:
            models = shares(
                unseen_models, "error", "every prediction, its model's intervals from the other models"
            )
            summary.append(models)
            lines += ["", "### a model the kept sessions never ran", "", models]
            lines += [shares([r for r in unseen_models if r["class"] == k], "error", f"  of them {k}")
                      for k in CLASSES if any(r["class"] == k for r in unseen_models)]  # fmt: skip
        published = None
        if args.published:
            found = scale_published.points(
                scale_published.load(args.published), Calibration(calibration_from(rows))
            )
            published = scale_published.summary(found)
            summary.append(
                f"published multi-node points: {published['inside']} of {published['points']} inside the 90% "
                f"interval, {published['within_5pt']} within 5 points of efficiency, median width "
                f"{published['median_width_pt']:.1f} points"
            )
            lines += ["", "### published multi-node runs", "", summary[-1], "", *scale_published.table(found)]
        text = "\n".join(lines).rstrip()
        print(text)
        if args.markdown:
            Path(args.markdown).write_text(text + "\n")
        if args.json:
            write_json(args.json, done, rows, summary, args.target)
        if args.calibrate:
            write_calibration(args.calibrate, rows, len(sessions), published, unseen_models)
    return 0


def model_of(row: dict[str, Any]) -> str:
    """The model a row ran (its runs' `model`: a preset's name or a local config's path)."""
    return str(row.get("model") or row["configuration"].split()[1])


def session_of(row: dict[str, Any]) -> str:
    return row["folder"]


def leave_one_out(
    done: dict[str, dict[str, Any]], unit: Callable[[dict[str, Any]], str] = session_of
) -> list[dict[str, Any]]:
    """Every row again with its interval from the calibration of the rows of other units alone: by
    session (one folder, whatever targets it was checked at), the kept sessions' check; by model
    (model_of: every strategy, shape and session of one model left out together), what a user's own
    model meets: its errors and its spread from host to host never seen."""
    every = [r for got in done.values() for r in got["rows"]]
    cals: dict[str, Calibration] = {}
    out = []
    for got in done.values():
        for r in got["rows"]:
            mine = unit(r)
            if mine not in cals:
                cals[mine] = Calibration(calibration_from([x for x in every if unit(x) != mine]))
            cal = cals[mine]
            by_ws, node, sizes = got["inputs"][r["configuration"]]
            again = validate(r["configuration"], by_ws, r["target"], node, sizes, cal)
            out.append({**r, **{k: again[k] for k in ("interval", "inside", "width")}})
    return out


def pooled_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for what, rs in (
        ("world size 2 from 1", [r for r in rows if r["target"] == 2]),
        (
            "world size 4 from 1 and 2",
            [r for r in rows if r["target"] == 4 and r["from_world_sizes"] == [1, 2]],
        ),
        (
            "world size 4 from 1 alone (two doublings)",
            [r for r in rows if r["from_world_sizes"] == [1] and r["target"] == 4],
        ),
    ):
        if rs:
            out.append(shares(rs, "error", f"{what}, every session"))
            for k in sorted({r["class"] for r in rs}):
                out.append(shares([r for r in rs if r["class"] == k], "error", f"  of them {k}"))
    every = [r for r in rows if r["target"] in (2, 4)]
    out.append(shares(every, "error", "all of it"))
    steady = steady_configurations([r for r in rows if r["target"] == 2])
    held = [r for r in every if (r["configuration"], r["gpu"]) in steady]
    if held:
        out.append(
            shares(
                held,
                "error",
                f"steady configurations (steps repeat within {STEADY_REPEAT:.1%} from host to host, "
                f"{len(steady)} of them)",
            )
        )
    return [line for line in out if line]


def write_json(
    path: str, done: dict[str, dict[str, Any]], rows: list[dict[str, Any]], summary: list[str], target: int
) -> None:
    first = next(iter(done.values()))
    doc = {
        "target_world_size": target,
        "link_probe_world_size": first["probe"],
        "link_probe_world_size_ahead": first["probe_ahead"],
        "validation": rows,
        "summary": summary,
        "predictions_ahead": [c for got in done.values() for c in got["ahead"]],
    }
    if len(done) > 1:
        doc["folders"] = {k: {"link_probe_world_size": g["probe"]} for k, g in done.items()}
    Path(path).write_text(json.dumps(doc, indent=1))


def write_calibration(
    path: str,
    rows: list[dict[str, Any]],
    sessions: int,
    published: dict[str, Any] | None,
    unseen_models: list[dict[str, Any]] | None,
) -> None:
    import datetime

    doc = calibration_from(rows, datetime.date.today().isoformat())
    gpus = sorted({r["gpu"] for r in rows if r["gpu"]})
    doc["check"] = check_summary(rows, sessions, ", ".join(gpus))
    if unseen_models:
        doc["check"]["unseen_model"] = {
            "models": len({model_of(r) for r in unseen_models}),
            **coverage(unseen_models),
        }
    doc["published"] = published
    # the command in pieces: as one line it would pass the line limit the module is held to
    doc["command"] = [
        "python tools/scale_validation.py --pooled",
        f"--published {PUBLISHED}",
        f"--calibrate {path}",
    ]
    text = (
        '"""What the scale intervals take: the kept validation\'s errors and spreads, and the figures its\n'
        "check gave (plan/interval.py reads it). Written by tools/scale_validation.py --calibrate: do not\n"
        'edit by hand."""\n\nimport json\nfrom typing import Any\n\n'
        'CALIBRATION: dict[str, Any] = json.loads(\n    """\n'
        + json.dumps(doc, indent=1, sort_keys=True)
        + '\n"""\n)\n'
    )
    Path(path).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
