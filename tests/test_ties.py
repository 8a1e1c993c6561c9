"""Ties on speed: no winner is named from noise.

Wherever llmbench names a faster configuration or input (the report's recommendation and its
patterns, the console's "fastest that fits" line, `llmbench compare`), two results whose
difference is inside the measurement's uncertainty are called tied, with their intervals, and the
recommendation chooses among them on peak memory and says so; a difference outside it is named
plainly, with its interval. report/ranking.py decides, with the regression gate's own estimate.

Result files are written by results.build_result (the real writer) from measured-looking step
times: a fixed noise pattern scaled so that each run's mean step time, and so its tokens/s, is
exactly the figure the test names. Nothing trains, so each test takes seconds.
"""

from __future__ import annotations

import json
import math
import random
from typing import TYPE_CHECKING, Any

import pytest
from test_report import assert_lines, llmbench, make_result, write_run, write_runs

from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.report.estimates import time_estimate
from llmbench_pytest.report.ranking import speed_gap
from llmbench_pytest.report.records import record_from_result
from llmbench_pytest.report.summary.build import Report
from llmbench_pytest.report.summary.table import summary_table
from llmbench_pytest.results.build import build_result
from llmbench_pytest.results.measurement import Measurement

if TYPE_CHECKING:
    from pathlib import Path

H100 = "NVIDIA H100 80GB HBM3"
TOKENS_PER_STEP = 2 * 2 * 128  # world size 2 x batch 2 x sequence 128


def steps_for(tokens_per_sec: float, cv: float, n: int = 24, seed: int = 0) -> list[float]:
    """n step times with spread `cv` whose mean gives exactly `tokens_per_sec` at 512 tokens a step."""
    rng = random.Random(seed)
    noise = [1 + cv * rng.gauss(0, 1) for _ in range(n)]
    scale = (TOKENS_PER_STEP / tokens_per_sec) / (sum(noise) / n)
    return [x * scale for x in noise]


def result(strategy: str, steps: list[float], peak_gb: float, device: str = "cpu") -> dict[str, Any]:
    """A result document as a two-rank run writes it, with these measured step times."""
    on_gpu = device == "cuda"
    spec = RunSpec(
        strategy=strategy,
        model="llama-tiny",
        seq_len=128,
        per_device_batch=2,
        grad_accum=1,
        steps=len(steps),
        warmup=1,
        dtype="bf16" if on_gpu else "fp32",
        world_size=2,
        device=device,
    )
    rank: dict[str, Any] = {"rank": 0, "status": "ok", "census_bytes": peak_gb * 0.4e9}
    if on_gpu:
        rank |= {"peak_allocated_bytes": peak_gb * 1e9, "device_total_bytes": 80e9}
    else:
        rank |= {"peak_rss_bytes": peak_gb * 1e9}
    m = Measurement(
        status="ok",
        step_times=steps,
        losses=[8.0 - 0.05 * i for i in range(len(steps))],
        window_s=sum(steps),
        timing_method="cuda_event" if on_gpu else "perf_counter",
        per_rank=[rank],
        model={"name": "llama-tiny", "params": 5_261_568, "flops_per_token": 26_850_816.0},
        env={"device": device, "gpu_name": H100 if on_gpu else None},
    )
    out = build_result(spec, m, {"nodes": 1, "ranks_per_node": 2})
    out["checks"] = []
    return out


def interval_of(r: dict[str, Any]) -> str:
    """The run's recorded 95% interval of its mean step time, as the report prints it."""
    return f"+-{100 * r['step_time_mean_interval']['relative']:.1f}%"


@pytest.fixture
def four_strategies(tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    """What a new user saw on the 2-core VM: fsdp_grad_op 3,025 tokens/s against ddp's 2,909 (4%
    apart) with intervals near +-8%; fsdp between them; zero2 steady and plainly slower. ddp needs
    the least memory of the three that are close."""
    runs = {
        "fsdp_grad_op": result("fsdp_grad_op", steps_for(3025, 0.19, seed=1), peak_gb=0.90),
        "fsdp": result("fsdp", steps_for(2950, 0.19, seed=2), peak_gb=0.75),
        "ddp": result("ddp", steps_for(2909, 0.19, seed=3), peak_gb=0.70),
        "zero2": result("zero2", steps_for(1500, 0.02, seed=4), peak_gb=0.60),
    }
    return write_runs(tmp_path / "results", *runs.values()), runs


def test_recommendation_calls_a_difference_inside_the_intervals_a_tie_and_chooses_on_memory(
    four_strategies: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    root, runs = four_strategies
    assert llmbench("report", root, "--no-plots").returncode == 0
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    # each run's own interval is what its result.json recorded (about +-8%)
    widths = [interval_of(runs[s]) for s in ("fsdp_grad_op", "fsdp", "ddp")]
    assert all(7.0 <= float(w[2:-1]) <= 10.0 for w in widths), widths
    assert_lines(
        md,
        "## At a glance",
        "| llama-tiny, seq 128, * | ddp (tied with fsdp_grad_op, fsdp; lower peak memory) *| *2,909 |*",
        "## Recommendation",
        f"- **fsdp_grad_op**, **fsdp** and **ddp** are tied on speed (within their {widths[0]}, "
        f"{widths[1]} and {widths[2]} intervals): 3,025, 2,950 and 2,909 tokens/s; against fsdp_grad_op, "
        "fsdp -2.5% (95% interval -*% .. +*%) and ddp -3.8% (95% interval -*% .. +*%) (block bootstrap, "
        "24 vs 24 steps).",
        "- **ddp** is chosen for its lower peak memory: 0.700 GB peak host RSS against 0.900 GB "
        "(fsdp_grad_op) and 0.750 GB (fsdp).",
        # outside the intervals: named plainly, with the interval and what it holds
        "- The next, zero2, is 50.4% slower than fsdp_grad_op: 1,500 tokens/s, 95% interval -5*% .. -4*%, "
        "outside the measurement's noise (block bootstrap, 24 vs 24 steps, *; from each run's own steps, "
        "so run-to-run noise is not in it: --llmbench-repeat=3 measures it).",
        # the leanest against the pick, not against the highest point estimate
        "- **zero2** needs the least memory: 0.600 GB peak host RSS, 14% less than ddp, for 48% less "
        "throughput (1,500 tokens/s).",
        "- Patterns in these results:",
        "  - **fast but memory-hungry**: fsdp_grad_op ws2: 3,025 tokens/s (100% of the best), 0.900 GB: "
        "29% more than ddp, which is as fast within the measurement's noise (2,909 tokens/s) in 0.700 GB*",
    )
    # no sentence calls one of the tied three faster, or the point estimate "the fastest"
    assert "**fsdp_grad_op** is the fastest" not in md
    assert "which is faster" not in md


def test_recommendation_names_a_difference_outside_the_intervals_plainly(tmp_path: Path) -> None:
    # the GPU case of the issue, with a GPU's steady steps (+-0.4%): fsdp_grad_op 241,163 tokens/s
    # is 2.9% ahead of fsdp's 234,280, far outside; zero2 and zero1 0.1% apart are a tie, but not
    # for the fastest, so the recommendation names fsdp_grad_op alone
    scale = 1000  # tokens/s at 512 tokens a step: the figures / 1000 keep the steps short
    root = write_runs(
        tmp_path / "r",
        result("fsdp_grad_op", steps_for(241.163 * scale, 0.01, seed=5), 30.0, device="cuda"),
        result("fsdp", steps_for(234.280 * scale, 0.01, seed=6), 28.0, device="cuda"),
        result("zero2", steps_for(232.725 * scale, 0.01, seed=7), 26.0, device="cuda"),
        result("zero1", steps_for(232.450 * scale, 0.01, seed=8), 27.0, device="cuda"),
    )
    assert llmbench("report", root, "--no-plots").returncode == 0
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "| llama-tiny, seq 128, * | fsdp_grad_op *| *241,163 |*",
        "- **fsdp_grad_op** is the fastest that fits: 241,163 tokens/s (step 0.0021 s), 30.0 GB peak "
        "GPU allocated.",
        "- The next, fsdp, is 2.9% slower than fsdp_grad_op: 234,280 tokens/s, 95% interval -3.*% .. -2.*%, "
        "outside the measurement's noise (block bootstrap, 24 vs 24 steps*).",
        "- **zero2** needs the least memory: 26.0 GB peak GPU allocated, 13% less than fsdp_grad_op, for 3% "
        "less throughput (232,725 tokens/s).",
    )
    assert "tied" not in md.split("## Results")[0]


def test_repeats_decide_ties_by_their_run_to_run_spread(tmp_path: Path) -> None:
    # steady steps inside each run (+-0.2%), but the runs of one configuration move by 3% from one
    # to the next: three repeats each, 1% apart on average. One run a side would call that real;
    # the runs say it is noise.
    root = tmp_path / "r"
    root.mkdir()
    for k, (a, b) in enumerate([(1000, 1010), (1030, 985), (975, 1020)], start=1):
        write_run(root, result("ddp", steps_for(a, 0.005, seed=10 + k), 0.70), repeat=k)
        write_run(root, result("zero2", steps_for(b, 0.005, seed=20 + k), 0.60), repeat=k)
    single = speed_gap(
        record_from_result(result("ddp", steps_for(1000, 0.005, seed=11), 0.7), "a"),
        record_from_result(result("zero2", steps_for(1010, 0.005, seed=21), 0.6), "b"),
    )
    assert not single.tied, "the premise: one run a side tells 1000 and 1010 apart"
    assert llmbench("report", root, "--no-plots").returncode == 0
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "- **zero2** and **ddp** are tied on speed (within their +-*% and +-*% intervals): 1,005 and "
        "1,002 tokens/s; against zero2, ddp -0.*% (95% interval -*% .. +*%) (Student t, 3 vs 3 runs).",
        "- **zero2** is chosen for its lower peak memory: 0.600 GB peak host RSS against 0.700 GB (ddp).",
        "- It also needs the least memory of the configurations that fit.",
    )


def test_without_enough_steps_for_the_bootstrap_the_recorded_intervals_decide(tmp_path: Path) -> None:
    # four steps a run (a short fixed window): each run's recorded 95% interval of its mean step
    # time, combined; 2% apart with intervals of about +-9% is a tie, 20% apart is not
    ddp = make_result("ddp", 1, step=0.50, jitter=0.05, peak_gb=30.0)
    zero2 = make_result("zero2", 1, step=0.51, jitter=0.05, peak_gb=24.0)
    zero3 = make_result("zero3", 1, step=0.60, jitter=0.01, peak_gb=16.0)
    root = write_runs(tmp_path / "r", ddp, zero2, zero3)
    width = interval_of(ddp)
    assert width == interval_of(zero2) == "+-9.2%"
    assert llmbench("report", root, "--no-plots").returncode == 0
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        f"- **ddp** and **zero2** are tied on speed (within their {width} and {width} intervals): 512 and "
        "502 tokens/s; against ddp, zero2 -2.0% (95% interval -13.*% .. +11.*%) (each run's 95% interval "
        "of its mean step time (+-9.2%, +-9.2%), combined).",
        "- **zero2** is chosen for its lower peak memory: 24.0 GB peak GPU allocated against 30.0 GB (ddp).",
        "- The next, zero3, is 16.7% slower than ddp: 427 tokens/s, 95% interval -2*% .. -*%, outside the "
        "measurement's noise (each run's 95% interval of its mean step time (+-9.2%, +-1.8%), combined; *",
    )


def test_tie_interval_is_the_gates_own(four_strategies: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    """The tie is the gate's estimate of the step-time ratio turned over, not another test."""
    _, runs = four_strategies
    a, b = (record_from_result(runs[s], s) for s in ("fsdp_grad_op", "ddp"))
    gap, est = speed_gap(a, b), time_estimate(a, b)
    assert (gap.ratio, gap.low, gap.high) == pytest.approx((1 / est.ratio, 1 / est.high, 1 / est.low))
    assert gap.method == est.method and gap.tied and est.low < 1 < est.high
    far = speed_gap(a, record_from_result(runs["zero2"], "zero2"))
    assert not far.tied and far.high is not None and far.high < 1


def test_summary_table_says_which_are_tied_and_which_is_chosen(
    four_strategies: tuple[Path, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    root, runs = four_strategies
    report = Report.from_dir(root)
    text = summary_table(report.configs, report.scaling, report.recommendations)
    widths = [interval_of(runs[s]) for s in ("fsdp_grad_op", "fsdp", "ddp")]
    assert_lines(
        text,
        "strategy*ranks*tokens/s*",
        "zero2 *2 *1,500*",
        f"fastest that fits: fsdp_grad_op, fsdp and ddp are tied on speed (within their {widths[0]}, "
        f"{widths[1]} and {widths[2]} intervals); ddp is chosen for its lower peak memory (0.700 GB); "
        "zero2 -50.4% (95% interval -5*% .. -4*%) against fsdp_grad_op",
        "CPU smoke: *",
    )
    # a plain winner where the difference is outside the intervals
    clear = write_runs(
        tmp_path / "clear",
        result("ddp", steps_for(2000, 0.02, seed=1), 0.7),
        result("zero2", steps_for(1700, 0.02, seed=2), 0.6),
    )
    report = Report.from_dir(clear)
    text = summary_table(report.configs, report.scaling, report.recommendations)
    assert_lines(
        text, "fastest that fits: ddp, 2,000 tokens/s; zero2 -15.0% (95% interval -1*% .. -1*%) against ddp"
    )
    assert "tied" not in text


def two_sessions(tmp_path: Path, b_rate: float, b_cv: float) -> tuple[Path, Path]:
    a = write_runs(tmp_path / "a", result("zero2", steps_for(3025, 0.19, seed=1), 0.70))
    b = write_runs(tmp_path / "b", result("zero2", steps_for(b_rate, b_cv, seed=2), 0.70))
    return a, b


def test_compare_calls_two_sessions_inside_their_intervals_tied(tmp_path: Path) -> None:
    a, b = two_sessions(tmp_path, 2783, 0.19)  # 0.92x, each +-8%
    proc = llmbench("compare", a, b, "--cost", "3.00", "3.00")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *CPU *3,025 *0.1693 *0.700 RSS *ref *$0.5510 *$0.0705 *tied fastest, tied cheapest",
        "* b *CPU *2,783 *0.1840 *0.700 RSS *0.92x (0.8*-1.0*) *$0.5989 *$0.0767 *tied fastest, tied cheap*",
        "zero2 ws2 seq128 llama-tiny b2x1 fp32: a and b are tied on speed (within their +-*% and +-*% "
        "intervals): against a, b 0.92x (0.8*x .. 1.0*x) (95% intervals; block bootstrap, 24 vs 24 "
        "steps*): the difference is noise, not the inputs.",
    )
    notes = [line.split()[-1] for line in proc.stdout.splitlines() if "RSS" in line]
    assert notes == ["cheapest", "cheapest"], "each row's note ends with the tied cost"
    assert " fastest\n" not in proc.stdout + "\n" and "  cheapest" not in proc.stdout


def test_compare_chooses_among_tied_inputs_on_cost_and_says_so(tmp_path: Path) -> None:
    a, b = two_sessions(tmp_path, 2783, 0.19)
    proc = llmbench("compare", a, b, "--cost", "3.00", "2.00")
    assert proc.returncode == 0, proc.stderr
    # the speeds are tied, the prices are not: b's cost per token is 0.67 / 0.92 = 0.72 of a's,
    # with an interval far from 1
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *3,025 *ref *$0.5510 *$0.0705 *tied fastest",
        "* b *2,783 *0.92x (*) *$0.3992 *$0.0511 *tied fastest, cheapest",
        "zero2 ws2 *: a and b are tied on speed * At a speed the measurements cannot tell apart, b is the "
        "cheaper: $0.3992 against $0.5510 per 1M tokens.",
    )


def test_compare_names_a_difference_outside_the_intervals_plainly(tmp_path: Path) -> None:
    a, b = two_sessions(tmp_path, 2000, 0.02)  # 0.66x: far outside a's +-8%
    proc = llmbench("compare", a, b, "--cost", "3.00", "3.00")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *3,025 *ref *$0.5510 *$0.0705 *fastest, cheapest",
        "* b *2,000 *0.66x (0.6*-0.7*) *$0.8333 *$0.1067",
    )
    assert "tied" not in proc.stdout.replace("tied fastest and tied cheapest those", "")


def test_gap_turned_over_is_the_same_comparison(
    four_strategies: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    _, runs = four_strategies
    a, b = (record_from_result(runs[s], s) for s in ("fsdp_grad_op", "zero2"))
    there, back = speed_gap(a, b), speed_gap(b, a)
    assert there.ratio * back.ratio == pytest.approx(1)
    # each direction's bootstrap resamples differently: the intervals agree to the resampling noise
    assert math.log(there.low) == pytest.approx(-math.log(back.high), abs=0.01)


def test_compare_says_when_a_lead_could_not_be_tested(tmp_path: Path) -> None:
    """A pytest-benchmark run saved without --benchmark-save-data keeps no step times: nothing
    measures its noise, so the faster input is marked untested rather than plainly fastest."""
    from test_compare import benchmark_json

    a = write_runs(tmp_path / "a", result("zero2", steps_for(3025, 0.19, seed=1), 0.70))
    saved = tmp_path / "store" / "Linux-CPython-3.11-64bit" / "0001_abc_20261127.json"
    saved.parent.mkdir(parents=True)
    data = benchmark_json([result("zero2", steps_for(2783, 0.19, seed=2), 0.70)], device="cpu")
    del data["benchmarks"][0]["extra_info"]["step_times_sec"]
    saved.write_text(json.dumps(data))
    proc = llmbench("compare", a, tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *CPU *3,025 *ref *fastest (untested)",
        "* store *CPU *2,783 *0.92x",
        "untested: an input kept no step times or repeats to measure its noise with*",
    )
    assert "0.92x (" not in proc.stdout and "tied" not in proc.stdout.replace("tied fastest and tied", "")
