"""Ties on speed: no winner is named from noise.

Wherever llmbench names a faster configuration or input (the report's recommendation and its
patterns, the console's "fastest that fits" line, `llmbench compare`), it asks the one speed
decision (analysis/decision.py through report/ranking.py): two results whose difference is inside
the spread between sessions are tied, with their intervals and the sessions a side that would tell
them apart, and the recommendation chooses among them on peak memory; a difference outside it is
named plainly, with its interval. One run's steps never tell two results apart.

The spreads between sessions come from a prior file written here (LLMBENCH_SESSION_SPREAD), so the
tests hold whatever the shipped measurements say. Result files are written by results.build_result
(the real writer) from measured-looking step times scaled so that each run's tokens/s is exactly the
figure the test names. Nothing trains, so each test takes seconds.
"""

from __future__ import annotations

import json
import math
import random
from typing import TYPE_CHECKING, Any

import pytest
from test_report import assert_lines, llmbench, make_result, write_runs

from llmbench_pytest.analysis.decision import FASTER, SLOWER, TIED
from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.report.evidence import speed
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
SPREADS = {
    ("CPU", "ddp"): 0.05,
    ("CPU", "fsdp"): 0.05,
    ("CPU", "fsdp_grad_op"): 0.05,
    ("CPU", "zero2"): 0.05,
    (H100, "ddp"): 0.05,
    (H100, "fsdp_grad_op"): 0.005,
    (H100, "fsdp"): 0.005,
    (H100, "zero2"): 0.01,
    (H100, "zero1"): 0.01,
}
"""The prior spread between sessions per device and strategy these tests decide with."""


def write_prior(path: Path, spreads: dict[tuple[str, str], float]) -> Path:
    """A decision_spread.json of these spreads (causal_lm, 8 degrees of freedom each)."""
    rows = [
        {
            "device": d,
            "workload": "causal_lm",
            "strategy": s,
            "sd_log": sd,
            "df": 8,
            "sessions": 10,
            "groups": 2,
        }
        for (d, s), sd in spreads.items()
    ]
    path.write_text(json.dumps({"sources": ["tests"], "date": "2026-11-28", "spreads": rows}))
    return path


@pytest.fixture(autouse=True)
def prior(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = write_prior(tmp_path_factory.mktemp("prior") / "spread.json", SPREADS)
    monkeypatch.setenv("LLMBENCH_SESSION_SPREAD", str(path))
    return path


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


@pytest.fixture
def four_strategies(tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    """What a new user saw: fsdp_grad_op 3,025 tokens/s against ddp's 2,909 (4% apart), fsdp between
    them, zero2 plainly slower; 5% between sessions for each. ddp needs the least memory of the three
    that are close."""
    runs = {
        "fsdp_grad_op": result("fsdp_grad_op", steps_for(3025, 0.05, seed=1), peak_gb=0.90),
        "fsdp": result("fsdp", steps_for(2950, 0.05, seed=2), peak_gb=0.75),
        "ddp": result("ddp", steps_for(2909, 0.05, seed=3), peak_gb=0.70),
        "zero2": result("zero2", steps_for(1500, 0.02, seed=4), peak_gb=0.60),
    }
    return write_runs(tmp_path / "results", *runs.values()), runs


WIDTH = "+-13.9%"
"""One session's 95% interval from a 5% spread with 4 degrees of freedom: 2.776 x 5%."""
METHOD = "t on session means, 1 vs 1 session(s), spread 5.0% between sessions (prior)"


def test_recommendation_calls_a_difference_inside_the_noise_a_tie_and_chooses_on_memory(
    four_strategies: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    root, _ = four_strategies
    assert llmbench("report", root, "--no-plots").returncode == 0
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "## At a glance",
        "| llama-tiny, seq 128, * | ddp (tied with fsdp_grad_op, fsdp; lower peak memory) *| *2,909 |*",
        "## Recommendation",
        f"- **fsdp_grad_op**, **fsdp** and **ddp** are tied on speed (within their {WIDTH}, {WIDTH} and "
        f"{WIDTH} intervals between sessions): 3,025, 2,950 and 2,909 tokens/s; against fsdp_grad_op, fsdp "
        f"-2.5% (95% interval -*% .. +*%) and ddp -3.8% (95% interval -*% .. +*%) ({METHOD}); * sessions a "
        "side would tell fsdp_grad_op and fsdp apart if the difference held.",
        "- **ddp** is chosen for its lower peak memory: 0.700 GB peak host RSS against 0.900 GB "
        "(fsdp_grad_op) and 0.750 GB (fsdp).",
        # outside the noise between sessions: named plainly, with the interval and how it was decided
        "- The next, zero2, is 50.4% slower than fsdp_grad_op: 1,500 tokens/s, 95% interval -*% .. -*%, "
        f"outside the noise between sessions ({METHOD}).",
        "- **zero2** needs the least memory: 0.600 GB peak host RSS, 14% less than ddp, for 48% less "
        "throughput (1,500 tokens/s).",
        "- Patterns in these results:",
        "  - **fast but memory-hungry**: fsdp_grad_op ws2: 3,025 tokens/s (100% of the best), 0.900 GB: "
        "29% more than ddp, which is as fast within the measurement's noise (2,909 tokens/s) in 0.700 GB*",
    )
    assert "**fsdp_grad_op** is the fastest" not in md
    assert "which is faster" not in md


def test_recommendation_names_a_difference_outside_the_noise_plainly(tmp_path: Path) -> None:
    # a GPU case: fsdp_grad_op 241,163 tokens/s is 2.9% ahead of fsdp's 234,280, where each moves
    # 0.5% between sessions; zero2 and zero1 0.1% apart are a tie, but not for the fastest
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
        "- The next, fsdp, is 2.9% slower than fsdp_grad_op: 234,280 tokens/s, 95% interval -*% .. -*%, "
        "outside the noise between sessions (t on session means, 1 vs 1 session(s), spread 0.5% between "
        "sessions (prior)).",
        "- **zero2** needs the least memory: 26.0 GB peak GPU allocated, 13% less than fsdp_grad_op, for 3% "
        "less throughput (232,725 tokens/s).",
        # where the spread came from: the prior's own words, its device, sessions and source
        "- The spread between sessions is from prior: fsdp_grad_op, causal_lm, on NVIDIA H100 80GB HBM3: 10 "
        "sessions in 2 groups (tests, 2026-11-28); *",
    )
    assert "tied" not in md.split("## Results")[0]


def test_one_runs_steady_steps_do_not_tell_two_configurations_apart(tmp_path: Path) -> None:
    """+-0.2% inside each run, 3% apart: a bootstrap of the steps would call that real. The spread
    between sessions (5% for ddp here) says one session a side cannot."""
    a = record_from_result(result("ddp", steps_for(1000, 0.005, seed=11), 0.7, device="cuda"), "a")
    b = record_from_result(result("zero2", steps_for(1030, 0.005, seed=21), 0.6, device="cuda"), "b")
    assert a.mean_sd < 0.002, "the premise: each run's own mean is known to 0.2%"
    gap = speed_gap(a, b)
    assert gap.tied and gap.low is not None and gap.low < 1 < (gap.high or 0)
    assert gap.settle is not None and gap.settle > 2
    assert gap.settle_words() == f"{gap.settle} sessions a side would tell them apart if the difference held"


def test_where_nothing_measured_the_spread_no_winner_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device without a prior (and one session each): the speeds are not told apart, 2x or not."""
    monkeypatch.setenv("LLMBENCH_SESSION_SPREAD", str(write_prior(tmp_path / "none.json", {})))
    root = write_runs(
        tmp_path / "r",
        make_result("ddp", 1, step=0.50, peak_gb=30.0),
        make_result("zero2", 1, step=1.00, peak_gb=24.0),
    )
    assert llmbench("report", root, "--no-plots").returncode == 0
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "- **ddp** and **zero2** are not told apart on speed (nothing measured the spread between sessions): "
        "512 and 256 tokens/s; against ddp, zero2 -50.0% (not tested) (not tested: 1 vs 1 session(s), "
        "nothing measured the spread between sessions); two or more sessions a side would measure the "
        "spread between sessions.",
        "- **zero2** is chosen for its lower peak memory: *",
    )
    assert "is the fastest" not in md and "slower than" not in md


def test_report_ties_and_the_gate_read_one_decision(
    four_strategies: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    """A ranking's gap is the speed decision on step time turned over, not another test."""
    _, runs = four_strategies
    a, b = (record_from_result(runs[s], s) for s in ("fsdp_grad_op", "ddp"))
    gap, dec = speed_gap(a, b), speed(a, b)
    assert (gap.ratio, gap.low, gap.high) == pytest.approx((1 / dec.ratio, 1 / dec.high, 1 / dec.low))
    assert gap.method == dec.method and gap.tied and dec.verdict == TIED
    far = speed(a, record_from_result(runs["zero2"], "zero2"))
    assert far.verdict == SLOWER and not speed_gap(a, record_from_result(runs["zero2"], "zero2")).tied
    assert speed(record_from_result(runs["zero2"], "zero2"), a).verdict == FASTER


def test_summary_table_says_which_are_tied_and_which_is_chosen(
    four_strategies: tuple[Path, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    root, _ = four_strategies
    report = Report.from_dir(root)
    text = summary_table(report.configs, report.scaling, report.recommendations)
    assert_lines(
        text,
        "strategy*ranks*tokens/s*",
        "zero2 *2 *1,500*",
        f"fastest that fits: fsdp_grad_op, fsdp and ddp are tied on speed (within their {WIDTH}, {WIDTH} and "
        f"{WIDTH} intervals between sessions); ddp is chosen for its lower peak memory (0.700 GB); "
        "zero2 -50.4% (95% interval -*% .. -*%) against fsdp_grad_op",
        "CPU smoke: *",
    )
    clear = write_runs(
        tmp_path / "clear",
        result("ddp", steps_for(2000, 0.02, seed=1), 0.7),
        result("zero2", steps_for(1200, 0.02, seed=2), 0.6),
    )
    report = Report.from_dir(clear)
    text = summary_table(report.configs, report.scaling, report.recommendations)
    assert_lines(
        text, "fastest that fits: ddp, 2,000 tokens/s; zero2 -40.0% (95% interval -*% .. -*%) against ddp"
    )
    assert "tied" not in text


def two_sessions(tmp_path: Path, b_rate: float) -> tuple[Path, Path]:
    a = write_runs(tmp_path / "a", result("zero2", steps_for(3025, 0.02, seed=1), 0.70))
    b = write_runs(tmp_path / "b", result("zero2", steps_for(b_rate, 0.02, seed=2), 0.70))
    return a, b


def test_compare_calls_two_sessions_inside_the_noise_between_sessions_tied(tmp_path: Path) -> None:
    a, b = two_sessions(tmp_path, 2783)  # 0.92x, 5% between sessions
    proc = llmbench("compare", a, b, "--cost", "3.00", "3.00")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *CPU *3,025 *0.1693 *0.700 RSS *ref *$0.5510 *$0.0705 *tied fastest, tied cheapest",
        "* b *CPU *2,783 *0.1840 *0.700 RSS *0.92x (0.*-1.*) *$0.5989 *$0.0767 *tied fastest, tied cheap*",
        f"zero2 ws2 seq128 llama-tiny b2x1 fp32: a and b are tied on speed (within their {WIDTH} and {WIDTH} "
        f"intervals between sessions): against a, b 0.92x (0.*x .. 1.*x) (95% intervals; {METHOD}): the "
        "difference is noise, not the inputs; * sessions a side would tell them apart if the difference "
        "held.",
    )
    assert " fastest\n" not in proc.stdout + "\n" and "  cheapest" not in proc.stdout


def test_compare_chooses_among_tied_inputs_on_cost_and_says_so(tmp_path: Path) -> None:
    a, b = two_sessions(tmp_path, 2783)
    proc = llmbench("compare", a, b, "--cost", "3.00", "2.00")
    assert proc.returncode == 0, proc.stderr
    # the speeds are tied, the prices are not: b's cost per token is 0.67 / 0.92 = 0.72 of a's
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *3,025 *ref *$0.5510 *$0.0705 *tied fastest",
        "* b *2,783 *0.92x (*) *$0.3992 *$0.0511 *tied fastest, cheapest",
        "zero2 ws2 *: a and b are tied on speed * At a speed the measurements cannot tell apart, b is the "
        "cheaper: $0.3992 against $0.5510 per 1M tokens.",
    )


def test_compare_names_a_difference_outside_the_noise_plainly(tmp_path: Path) -> None:
    a, b = two_sessions(tmp_path, 2000)  # 0.66x: far outside 5% between sessions
    proc = llmbench("compare", a, b, "--cost", "3.00", "3.00")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *3,025 *ref *$0.5510 *$0.0705 *fastest, cheapest",
        "* b *2,000 *0.66x (0.*-0.*) *$0.8333 *$0.1067",
    )
    assert "tied" not in proc.stdout.replace("tied fastest and tied cheapest those", "")


def test_gap_turned_over_is_the_same_comparison(
    four_strategies: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    _, runs = four_strategies
    a, b = (record_from_result(runs[s], s) for s in ("fsdp_grad_op", "zero2"))
    there, back = speed_gap(a, b), speed_gap(b, a)
    assert there.ratio * back.ratio == pytest.approx(1)
    assert there.low is not None and back.high is not None
    assert math.log(there.low) == pytest.approx(-math.log(back.high), abs=1e-9)


def test_compare_says_when_nothing_measured_the_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One session an input and no prior for the device: the faster input is not named fastest."""
    monkeypatch.setenv("LLMBENCH_SESSION_SPREAD", str(write_prior(tmp_path / "none.json", {})))
    a, b = two_sessions(tmp_path, 2783)
    proc = llmbench("compare", a, b)
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "zero2 ws2 * a *CPU *3,025 *ref *tied fastest",
        "* b *CPU *2,783 *0.92x *tied fastest",
        "untested: nothing measured the spread between sessions of an input*",
    )
    assert "0.92x (0" not in proc.stdout  # no interval where nothing measured the noise


def test_no_report_names_a_winner_between_identical_configurations(tmp_path: Path) -> None:
    """Two strategies that measured the same speed to the step: tied, whatever their spreads."""
    steps = steps_for(2000, 0.02, seed=9)
    root = write_runs(tmp_path / "r", result("ddp", steps, 0.70), result("fsdp", steps, 0.70))
    report = Report.from_dir(root)
    (rec,) = report.recommendations
    assert rec.speed is not None and rec.speed.is_tie
    text = summary_table(report.configs, report.scaling, report.recommendations)
    assert "are tied on speed" in text and "fastest that fits: ddp, 2,000" not in text


def test_a_table_cell_never_contradicts_the_recommendations_words(tmp_path: Path) -> None:
    """The issue's case: fsdp's own steps gave +-40% in the table's `mean +-` column while the
    recommendation called it 18% slower, 'outside the noise'. A session's own noise is a floor
    under the spread between sessions, so the words' interval is never narrower than the cell's."""
    runs = [
        result("ddp", steps_for(2000, 0.02, seed=1), 0.70),
        result("fsdp", steps_for(1640, 0.9, n=12, seed=2), 0.60),
    ]
    for r in runs:  # the window's precision, as a measured run records it: its mean's own interval
        r["timing"] = {
            "measurement": {"precision": r["step_time_mean_interval"]["relative"], "stopped": "fixed"}
        }
    root = write_runs(tmp_path / "r", *runs)
    report = Report.from_dir(root)
    text = summary_table(report.configs, report.scaling, report.recommendations)
    cell = next(c for c in report.configs if c.strategy == "fsdp").window[0]
    assert cell is not None and cell > 0.3, "the premise: a noisy run, its own interval wide"
    (rec,) = report.recommendations
    assert rec.speed is not None and rec.speed.is_tie, text
    own = rec.speed.interval(next(c for c in rec.configs if c.strategy == "fsdp"))
    assert own is not None and own >= cell * 0.99
    md_root = tmp_path / "r"
    assert llmbench("report", md_root, "--no-plots").returncode == 0
    assert "outside the noise" not in (md_root / "summary" / "BENCHMARK_REPORT.md").read_text()
