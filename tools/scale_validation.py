"""Out-of-sample check of the scale prediction (llmbench_pytest/plan/scale.py).

    python tools/scale_validation.py RESULTS_DIR [--json out.json] [--markdown out.md]

For every configuration RESULTS_DIR holds at world sizes 1 and 2: predict world size 2 from the
1-GPU run and the link probe alone (no 2-GPU timing is used; the probe itself ran on the 2 GPUs),
and compare with the measured 2-GPU step; the model's collective schedule is checked against what
the 2-GPU profiled steps recorded (bus bytes per step). Then, from the 1- and 2-GPU runs together
(the 2-GPU miss carried), the predictions at 4 and 8 GPUs of one node are written, to be checked
when a 4- or 8-GPU host runs the same configurations. Prints a markdown table and the shares within
5% and 10%.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmbench_pytest.plan.network import Fabric, widest_sweep
from llmbench_pytest.plan.scale import bus_bytes, predict_config, schedule
from llmbench_pytest.plan.scale_command import group
from llmbench_pytest.report.collect import load_results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results_dir")
    ap.add_argument("--json", help="write the table and the 4- and 8-GPU predictions here")
    ap.add_argument("--markdown", help="write the table here as well")
    args = ap.parse_args()
    runs = load_results(Path(args.results_dir)).runs
    sweep = widest_sweep(r.data for r in runs)
    if sweep is None:
        print("no link probe in these results (a session at world size 2 measures it)", file=sys.stderr)
        return 2
    node = Fabric(sweep, gpus_per_node=8)
    rows, ahead = [], []
    for name, members in sorted(group(runs).items()):
        by_ws = {int(m["world_size"]): m for m in members}
        if 1 not in by_ws or 2 not in by_ws:
            continue
        predicted = next(
            p for p in predict_config(name, [by_ws[1]], [2], node).predictions if p.world_size == 2
        )
        measured = float(by_ws[2]["mean_step_time_sec"])
        comm = by_ws[2].get("communication") or {}
        model_bytes = bus_bytes(schedule(by_ws[1]), 2)
        rows.append(
            {
                "configuration": name,
                "ws1_step_sec": float(by_ws[1]["mean_step_time_sec"]),
                "predicted_ws2_step_sec": predicted.step_sec,
                "measured_ws2_step_sec": measured,
                "error": predicted.step_sec / measured - 1,
                "measured_interval_ws2": (by_ws[2].get("step_time_mean_interval") or {}).get("relative"),
                "predicted_exposed_sec": predicted.exposed_sec,
                "measured_exposed_share": comm.get("exposed_fraction_of_step"),
                "model_bus_bytes": model_bytes,
                "measured_bus_bytes": comm.get("bus_bytes_per_step"),
            }
        )
        ahead.append(predict_config(name, [by_ws[1], by_ws[2]], [4, 8], node).to_dict())
    if not rows:
        print("no configuration was run at both world sizes 1 and 2", file=sys.stderr)
        return 2
    within = {b: sum(abs(r["error"]) <= b for r in rows) for b in (0.05, 0.10)}
    lines = [
        "| configuration | ws1 step s | predicted ws2 | measured ws2 | error | bytes model / measured |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        mb = r["measured_bus_bytes"]
        bytes_cell = f"{r['model_bus_bytes'] / 1e9:.3f} / {mb / 1e9:.3f} GB" if mb else "-"
        lines.append(
            f"| {r['configuration']} | {r['ws1_step_sec']:.4f} | {r['predicted_ws2_step_sec']:.4f} | "
            f"{r['measured_ws2_step_sec']:.4f} | {r['error']:+.1%} | {bytes_cell} |"
        )
    summary = (
        f"{len(rows)} configurations: {within[0.05]} ({within[0.05] / len(rows):.0%}) within 5%, "
        f"{within[0.10]} ({within[0.10] / len(rows):.0%}) within 10%"
    )
    table = "\n".join([*lines, "", summary])
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        doc = {"validation_ws2_from_ws1": rows, "summary": summary, "predictions_ws4_ws8": ahead}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
