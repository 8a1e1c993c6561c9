"""`llmbench compare`: the same configurations across machines with prices (seeds 001 and 003)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from test_report import assert_lines, assert_one_line_error, llmbench, make_result, write_runs

from llmbench_pytest.session.recording import EXTRA_KEYS

# synthetic GPU runs of llama-tiny stand for the models the prior was measured on
pytestmark = pytest.mark.usefixtures("prior_for_tiny_gpu_runs")

H200 = "NVIDIA H200"


def benchmark_json(
    results: list[dict[str, Any]], device: str = "cuda", gpu: str | None = None
) -> dict[str, Any]:
    """A pytest-benchmark saved run as llmbench's recording writes it (stats over the step times)."""
    benches = []
    for r in results:
        times = r["step_times_sec"]
        name = f"test_pretrain[{r['strategy']}-ws{r['world_size']}-seq{r['seq_len']}-{r['model']}]"
        benches.append(
            {
                "group": f"{r['model']} seq{r['seq_len']} ws{r['world_size']}",
                "name": name,
                "fullname": f"benchmarks/test_pretrain.py::{name}",
                "params": {k: r[k] for k in ("strategy", "world_size", "seq_len", "model")},
                "extra_info": {k: r.get(k) for k in EXTRA_KEYS},
                "stats": {
                    "min": min(times),
                    "max": max(times),
                    "mean": statistics.fmean(times),
                    "stddev": statistics.stdev(times),
                    "median": statistics.median(times),
                    "rounds": len(times),
                    "iterations": 1,
                },
            }
        )
    return {
        "machine_info": {"node": "h", "llmbench": {"device": device, "gpu_name": gpu, "world_size": 1}},
        "commit_info": {"id": "abc", "dirty": False},
        "benchmarks": benches,
        "datetime": "2026-11-22T01:08:02",
        "version": "5.3.1",
    }


@pytest.fixture
def machines(tmp_path: Path) -> tuple[Path, Path]:
    """The same two configurations on an H100 box and an H200 box; the H200 is 1.6x faster."""
    h100 = write_runs(
        tmp_path / "h100",
        make_result("zero2", 2, step=0.50, peak_gb=40.0),
        make_result("zero3", 2, step=0.80, peak_gb=25.0),
    )
    h200 = write_runs(
        tmp_path / "h200",
        make_result("zero2", 2, step=0.3125, peak_gb=40.0, gpu=H200),
        make_result("zero3", 2, step=0.50, peak_gb=25.0, gpu=H200),
    )
    return h100, h200


def test_compare_with_prices_gives_cost_per_million_tokens_and_thousand_samples(
    machines: tuple[Path, Path],
) -> None:
    h100, h200 = machines
    proc = llmbench("compare", h100, h200, "--cost", "3.00", "5.50")
    assert proc.returncode == 0, proc.stderr
    # zero2 on H100: 2 ranks x 2 x 128 tokens / 0.5 s = 1,024 tokens/s, 4 samples / 0.5 s = 8 samples/s
    #   $3.00 x 2 GPUs / 3600 = $0.0016667/s -> $1.63 per 1M tokens, $0.2083 per 1K samples
    # on H200: 1,638 tokens/s (1.60x), $5.50 x 2 / 3600 / 1638.4 x 1e6 = $1.86, / 12.8 x 1e3 = $0.2387
    assert_lines(
        proc.stdout,
        f"h100: {h100} on NVIDIA H100 80GB HBM3, $3.00 per GPU-hour",
        f"h200: {h200} on NVIDIA H200, $5.50 per GPU-hour",
        "configuration*input*hardware*tokens/s*step s*peak GB*speed-up*$/1M tokens*$/1K samples*note",
        "zero2 ws2 seq128 llama-tiny b2x1 bf16 *h100 *NVIDIA H100 80GB HBM3 *1,024 *0.5000 *40.0 *ref "
        "*$1.63 *$0.2083 *cheapest",
        "*h200 *NVIDIA H200 *1,638 *0.3125 *40.0 *1.60x *$1.86 *$0.2387 *fastest",
        "zero3 ws2 seq128 llama-tiny b2x1 bf16 *h100 *640 *0.8000 *25.0 *ref*",
        "*h200 *1,024 *0.5000*1.60x*",
        "cost: $/GPU-hour x world size / 3600 / (tokens/s or samples/s); per 1M tokens and per 1K samples.",
    )


def test_compare_writes_markdown(machines: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.md"
    proc = llmbench("compare", *machines, "--cost", "3", "5.5", "--markdown", out)
    assert proc.returncode == 0, proc.stderr
    md = out.read_text()
    assert_lines(
        md,
        "# Comparison",
        "- h100: * on NVIDIA H100 80GB HBM3, $3.00 per GPU-hour",
        "| configuration *| input *| hardware *| *tokens/s | *step s | *peak GB | *speed-up "
        "| *$/1M tokens |*",
        "| zero2 ws2 seq128 llama-tiny b2x1 bf16 *| h100 *|*| *$1.63 |*",
    )
    assert f"wrote {out}" in proc.stdout


def test_compare_without_prices_has_no_cost_columns(machines: tuple[Path, Path]) -> None:
    proc = llmbench("compare", *machines)
    assert proc.returncode == 0, proc.stderr
    assert "$/1M tokens" not in proc.stdout
    assert_lines(proc.stdout, "*h200 *1,638 *0.3125 *40.0 *1.60x *fastest")


def test_compare_reads_pytest_benchmark_saved_runs(machines: tuple[Path, Path], tmp_path: Path) -> None:
    saved = tmp_path / "store" / "Linux-CPython-3.11-64bit" / "0001_abc_20261122.json"
    saved.parent.mkdir(parents=True)
    h200 = [make_result("zero2", 2, step=0.25, peak_gb=41.0, gpu=H200)]
    saved.write_text(json.dumps(benchmark_json(h200, gpu=H200)))
    proc = llmbench("compare", machines[0], tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        f"store: {saved} on NVIDIA H200 [[]newest of 1 saved run(s) under {tmp_path / 'store'}]",
        "zero2 ws2 *h100 *1,024*ref*",
        "*store *NVIDIA H200 *2,048 *0.2500 *41.0 *2.00x*",
    )


@pytest.mark.parametrize(
    ("cost", "pattern"),
    [
        (
            ["3.00"],
            "llmbench compare: error: --cost: 1 price(s) for 2 input(s) (h100, h200); "
            "give one $ per GPU-hour per input, in the same order",
        ),
        (["3.00", "5.50", "8.00"], "llmbench compare: error: --cost: 3 price(s) for 2 input(s)*"),
        (
            ["3.00", "lots"],
            "llmbench compare: error: --cost: 'lots' for h200 is not a number; write e.g. 3.00",
        ),
        (["3.00", "-1"], "llmbench compare: error: --cost: '-1' for h200 must be a price of 0 or more*"),
    ],
    ids=["too-few", "too-many", "not-a-number", "negative"],
)
def test_bad_prices_are_one_clear_error(machines: tuple[Path, Path], cost: list[str], pattern: str) -> None:
    assert_one_line_error(llmbench("compare", *machines, "--cost", *cost), pattern)


def test_missing_input_is_one_clear_error(machines: tuple[Path, Path], tmp_path: Path) -> None:
    proc = llmbench("compare", machines[0], tmp_path / "nope")
    assert_one_line_error(
        proc, "llmbench compare: error: */nope does not exist. Pass a results folder, a result.json*"
    )


def test_cpu_rows_are_not_performance_claims(tmp_path: Path) -> None:
    a = write_runs(tmp_path / "a", make_result("ddp", 1, device="cpu", peak_gb=0.5))
    b = write_runs(tmp_path / "b", make_result("ddp", 1, device="cpu", peak_gb=0.5, step=0.4))
    proc = llmbench("compare", a, b)
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "ddp ws1 *a *CPU *512 *0.5000 *0.500 RSS *ref*",
        "CPU smoke rows show that the code ran; their speed and cost are not performance claims.",
    )
