"""Choose the measured window's time budget from GPU runs already measured: replay each adaptive
run's own step times under the stop rule with a budget added, and say what each budget saves and
what it costs in precision and in agreement with the run's whole window.

    python3 tools/window_budget.py docs/results                 # the table for a few budgets
    python3 tools/window_budget.py docs/results --budgets 10,20,30 --json out.json

A replay can only stop earlier than the run did (it has no steps past the run's end), so the
figures are what a budget would have changed in those runs: the window seconds spent, how many
windows the budget stopped, the precision those reached, and whether their mean step time lies
within that precision of the whole window's mean (the answer a longer window gives).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmbench_pytest.analysis.stats import mean_interval
from llmbench_pytest.worker.adaptive import BUDGET, CAP, PRECISION, StopRule, stop_reason

DEFAULT_BUDGETS = (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)


def adaptive_gpu_runs(root: Path) -> list[dict]:
    """Every rank-0 result.json under root measured adaptively on a GPU, with its step times."""
    runs = []
    for path in sorted(root.rglob("result.json")):
        data = json.loads(path.read_text())
        plan = (data.get("timing") or {}).get("measurement") or {}
        if data.get("device") != "cuda" or plan.get("mode") != "adaptive" or not data.get("step_times_sec"):
            continue
        if data.get("status") != "ok" or (data.get("epochs") or 0) > 0:
            continue  # epoch workloads stop at epoch ends, not at check points
        tokens = data["per_device_batch"] * data["seq_len"] * data["grad_accum"] * data["world_size"]
        runs.append({"path": str(path.relative_to(root)), "plan": plan, "times": data["step_times_sec"],
                     "tokens_per_step": (data["model"], tokens)})  # fmt: skip
    return runs


def replay(times: list[float], plan: dict, budget_s: float) -> tuple[int, str]:
    """Steps the window would hold, and why it stops, under the run's own plan and a budget."""
    # runs made before the budget existed were judged by the default --llmbench-max-interval
    floor = plan.get("budget_precision") or 0.10
    rule = StopRule(True, plan["min_steps"], plan["max_steps"], plan["target_precision"],
                    plan["check_every"], budget_s, floor)  # fmt: skip
    # the replay reads every step it has queued (a GPU's device runs a step or so behind its host:
    # the same schedule then checks a step later, on the same finished steps)
    done = rule.first_check
    while done <= len(times) and done < rule.last:
        interval = mean_interval(times[:done])
        mean = sum(times[:done]) / done
        why = stop_reason(rule, done, interval.relative if interval else None, sum(times[:done]), done)
        if why is not None:
            return done, why
        done = rule.next_check(done, done, mean)
    return len(times), CAP if len(times) >= rule.cap else PRECISION


def ranking_swaps(runs: list[dict], means: list[float]) -> tuple[int, int]:
    """Pairs of runs of one session (one folder, the same model and tokens per step) whose order by
    mean step time differs between the replayed and the whole windows; and the pairs compared."""
    by_folder: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        by_folder.setdefault(str(Path(run["path"]).parent.parent), []).append(i)
    swaps = pairs = 0
    for members in by_folder.values():
        for a, b in ((a, b) for a in members for b in members if a < b):
            if runs[a]["tokens_per_step"] != runs[b]["tokens_per_step"]:
                continue
            full_a, full_b = (sum(runs[i]["times"]) / len(runs[i]["times"]) for i in (a, b))
            pairs += 1
            swaps += (full_a < full_b) != (means[a] < means[b])
    return swaps, pairs


def study(runs: list[dict], budgets: list[float]) -> list[dict]:
    rows = []
    for budget in budgets:
        spent = stopped = within = 0
        worst = 0.0
        means = []
        for run in runs:
            times = run["times"]
            steps, why = replay(times, run["plan"], budget)
            spent += sum(times[:steps])
            means.append(sum(times[:steps]) / steps)
            if why != BUDGET:
                continue
            stopped += 1
            short = mean_interval(times[:steps])
            full = sum(times) / len(times)
            mean = sum(times[:steps]) / steps
            worst = max(worst, short.relative)
            within += abs(mean - full) / full <= short.relative
        swaps, pairs = ranking_swaps(runs, means)
        rows.append({"budget_s": budget, "window_s": round(spent, 1), "budget_stopped": stopped,
                     "worst_precision": round(worst, 4), "agree_within_precision": within,
                     "ranking_swaps": swaps, "ranking_pairs": pairs})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path, help="a folder of result.json files (searched recursively)")
    parser.add_argument("--budgets", default=",".join(f"{b:g}" for b in DEFAULT_BUDGETS),
                        help="window budgets to replay, seconds, comma-separated")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a folder")
    runs = adaptive_gpu_runs(args.root)
    if not runs:
        parser.error(f"no adaptive GPU run with step times under {args.root}")
    full = sum(sum(r["times"]) for r in runs)
    print(f"{len(runs)} adaptive GPU runs under {args.root}; their windows as measured: {full:.1f} s")
    rows = study(runs, [float(b) for b in args.budgets.split(",")])
    print("| budget s | window s | share of measured | stopped by budget | worst precision "
          "| within it of the whole window | ranking pairs swapped |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['budget_s']:g} | {r['window_s']:.1f} | {r['window_s'] / full:.0%} | "
              f"{r['budget_stopped']} | "
              f"+-{r['worst_precision']:.1%} | {r['agree_within_precision']} of {r['budget_stopped']} | "
              f"{r['ranking_swaps']} of {r['ranking_pairs']} |")  # fmt: skip
    if args.json:
        figures = {"runs": len(runs), "measured_window_s": full, "rows": rows}
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
