"""`llmbench report`: seed 000's summary folder, scaling with its baseline, the recommendation,
failed checks and OOMs in the report, CPU labelling, bad input. Run as users run it: the command.

Result files are written by results.build_result (the real writer) from a small template, so
these tests train nothing and take seconds.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.results.build import build_result
from llmbench_pytest.results.measurement import Measurement
from llmbench_pytest.results.schema import SEED_FIELDS

# synthetic GPU runs of llama-tiny stand for the models the prior was measured on
pytestmark = pytest.mark.usefixtures("prior_for_tiny_gpu_runs")

H100 = "NVIDIA H100 80GB HBM3"
PLOTS = (
    "tokens_per_sec_vs_gpu.png",
    "step_time_vs_gpu.png",
    "scaling_efficiency.png",
    "gbps_vs_gpu.png",
    "peak_memory_per_strategy.png",
    "mfu_per_strategy.png",
)


def make_result(
    strategy: str = "ddp",
    ws: int = 1,
    step: float = 0.5,
    jitter: float = 0.01,
    peak_gb: float = 10.0,
    device: str = "cuda",
    gpu: str | None = H100,
    status: str = "ok",
    batch: int = 2,
    grad_accum: int = 1,
    seq: int = 128,
    model: str = "llama-tiny",
    checks: list[dict[str, Any]] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """A result document as a run writes it; step times alternate step*(1 -/+ jitter)."""
    base, _, off = strategy.partition("_")
    spec = RunSpec(
        strategy=base,
        offload={"offload": "cpu", "nvme": "nvme"}.get(off, "none"),
        nvme_path="/nvme" if off == "nvme" else None,
        model=model,
        seq_len=seq,
        per_device_batch=batch,
        grad_accum=grad_accum,
        steps=4,
        warmup=1,
        dtype="bf16" if device == "cuda" else "fp32",
        world_size=ws,
        device="cuda" if device == "cuda" else "cpu",
    )
    on_gpu = device == "cuda"
    rank = {"rank": 0, "status": status, "census_bytes": peak_gb * 0.4e9}
    if on_gpu:
        rank |= {
            "peak_allocated_bytes": peak_gb * 1e9,
            "peak_reserved_bytes": peak_gb * 1.1e9,
            "device_total_bytes": 80e9,
        }
    else:
        rank |= {"peak_rss_bytes": peak_gb * 1e9}
    ok = status == "ok"
    m = Measurement(
        status=status,
        error=error,
        failed_ranks=[] if ok else [1],
        step_times=[step * (1 - jitter), step * (1 + jitter)] * 2 if ok else [],
        losses=[8.0, 7.5, 7.0, 6.5] if ok else [],
        window_s=4 * step if ok else None,
        timing_method="cuda_event" if on_gpu else "perf_counter",
        per_rank=[rank],
        model={"name": model, "params": 5_261_568, "flops_per_token": 26_850_816.0},
        env={"device": device, "gpu_name": gpu if on_gpu else None},
    )
    result = build_result(spec, m, {"nodes": 1, "ranks_per_node": ws})
    result["checks"] = checks or []
    return result


def write_run(root: Path, result: dict[str, Any], repeat: int = 1) -> Path:
    """Where a run puts it: root/bench-<host>-<strategy>-ws<N>-seq<L>[-rK]_results/result.json."""
    name = f"bench-h-{result['strategy']}-ws{result['world_size']}-seq{result['seq_len']}"
    if result.get("per_device_batch") != 2:
        name += f"-b{result['per_device_batch']}"
    if repeat > 1:
        name += f"-r{repeat}"
    path = root / f"{name}_results" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result, indent=2))
    return path


def write_runs(root: Path, *results: dict[str, Any]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for r in results:
        write_run(root, r)
    return root


def llmbench(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The `llmbench` command as users run it."""
    return subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def assert_lines(text: str, *patterns: str) -> None:
    """Each fnmatch pattern matches some line, in order."""
    lines = text.splitlines()
    i = 0
    for pat in patterns:
        while i < len(lines) and not fnmatch(lines[i], pat):
            i += 1
        assert i < len(lines), f"no line matching {pat!r} (in order) in:\n{text}"
        i += 1


def assert_one_line_error(proc: subprocess.CompletedProcess[str], pattern: str, code: int = 2) -> None:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, proc.stderr
    assert fnmatch(errors[0], pattern), errors[0]


@pytest.fixture
def gpu_results(tmp_path: Path) -> Path:
    """ddp, zero2 and zero3 at one and two GPUs: ddp fastest and hungriest, zero3 leanest."""
    return write_runs(
        tmp_path / "results",
        make_result("ddp", 1, step=0.50, peak_gb=30.0),
        make_result("zero2", 1, step=0.52, peak_gb=24.0),
        make_result("zero3", 1, step=0.60, peak_gb=16.0),
        make_result("ddp", 2, step=0.55, peak_gb=30.0),
        make_result("zero2", 2, step=0.53, peak_gb=20.0),
        make_result("zero3", 2, step=1.20, peak_gb=12.0),
    )


def test_report_writes_the_seed_000_summary_folder(gpu_results: Path) -> None:
    proc = llmbench("report", gpu_results)
    assert proc.returncode == 0, proc.stderr
    summary = gpu_results / "summary"
    assert_lines(
        proc.stdout,
        "hardware NVIDIA H100 80GB HBM3; model llama-tiny; seq 128; batch 2x1; dtype bf16",
        "strategy*GPUs*tokens/s*step s*CV*peak GB (GPU allocated)*scaling*MFU*status*",
        "ddp *1 *512 *0.5000*",
        "zero3 *2 *427 *1.200 *1.2%*12.0*50% (weak, vs ws1)*",
        f"wrote {summary / 'metrics.csv'}",
        f"wrote {summary / 'BENCHMARK_REPORT.md'}",
        f"wrote 6 plots under {summary / 'plots'}",
    )
    for name in PLOTS:
        png = summary / "plots" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_metrics_csv_has_seed_columns_then_scaling_then_new_metrics(gpu_results: Path) -> None:
    assert llmbench("report", gpu_results, "--no-plots").returncode == 0
    with open(gpu_results / "summary" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
        header = list(rows[0])
    assert header[:13] == list(SEED_FIELDS)
    assert header[13] == "scaling_efficiency_pct"
    later = ("status", "samples_per_sec", "step_cv_in_run", "model_state_gb", "mfu", "mfu_reason", "device")
    for new in later:
        assert new in header[14:]
    by = {(r["strategy"], r["world_size"]): r for r in rows}
    t1 = float(by["zero2", "1"]["tokens_per_sec"])
    t2 = float(by["zero2", "2"]["tokens_per_sec"])
    assert float(by["zero2", "2"]["scaling_efficiency_pct"]) == pytest.approx(100 * t2 / (2 * t1))
    assert by["zero2", "2"]["scaling_mode"] == "weak"
    assert by["zero2", "2"]["scaling_baseline_world_size"] == "1"
    assert float(by["ddp", "1"]["mfu"]) > 0  # H100 bf16 peak is in fixtures/gpus.toml


def test_a_result_written_before_step_cv_in_run_was_named_reads_as_today(tmp_path: Path) -> None:
    # result.json's within-run step-time CV was called `step_time_cv`, the name of the check that
    # compares runs; a file of that time still fills the step_cv_in_run column and the step CV cell
    today = make_result("zero2", jitter=0.1)
    assert "step_cv_in_run" in today and "step_time_cv" not in today
    old = make_result("ddp", jitter=0.1)
    old["step_time_cv"] = old.pop("step_cv_in_run")
    root = write_runs(tmp_path / "results", old, today)
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    with open(root / "summary" / "metrics.csv") as fh:
        rows = {r["strategy"]: r for r in csv.DictReader(fh)}
    assert "step_time_cv" not in rows["ddp"]
    cv = today["step_cv_in_run"]
    assert cv == pytest.approx(0.1155, abs=1e-3)
    assert float(rows["ddp"]["step_cv_in_run"]) == pytest.approx(cv)
    assert float(rows["zero2"]["step_cv_in_run"]) == pytest.approx(cv)
    assert_lines(proc.stdout, "*ddp * 1 *11.5%*", "*zero2 * 1 *11.5%*")


def test_report_recommends_with_evidence(gpu_results: Path) -> None:
    assert llmbench("report", gpu_results, "--no-plots").returncode == 0
    md = (gpu_results / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "## Recommendation",
        "### llama-tiny, seq 128, batch 2x1 per rank, bf16 on 1x NVIDIA H100 80GB HBM3",
        # one session each: zero3's steps move 8.6% between sessions on an H100 (the prior), so 17%
        # slower than ddp is inside the noise; zero2, 3.8% behind, within ddp's and its own
        "- **ddp**, **zero2** and **zero3** are tied on speed (within their +-*%, +-*% and +-*% intervals "
        "between sessions): 512, 492 and 427 tokens/s; against ddp, zero2 -3.8% (95% interval *) and zero3 "
        "-16.7% (95% interval *) (t on session means, 1 vs 1 session(s), *); * sessions a side would tell "
        "ddp and zero2 apart if the difference held.",
        "- **zero3** is chosen for its lower peak memory: 16.0 GB peak GPU allocated against 30.0 GB (ddp) "
        "and 24.0 GB (zero2).",
        "  - **fast but memory-hungry**: ddp ws1: *",
        "  - **memory-efficient with good speed**: zero2 ws1: *",
        "### *on 2x NVIDIA H100 80GB HBM3",
        "  - **highest throughput, medium memory**: zero2 ws2:*",
        "  - **poor scaling**: zero3 ws2: 50% efficiency (weak scaling against a measured 1-GPU run)*",
    )


def test_fastest_that_fits_skips_oom_and_over_limit_runs(tmp_path: Path) -> None:
    over = {
        "name": "peak_memory",
        "passed": False,
        "message": "ddp: peak reserved GPU memory 90.000 GB exceeds the limit of 80.000 GB. Shard more ...",
        "measured": 90.0,
        "limit": 80.0,
    }
    root = write_runs(
        tmp_path / "r",
        make_result("ddp", 2, step=0.40, peak_gb=82.0, checks=[over]),
        make_result("zero0", 2, status="oom", error="rank 1: CUDA out of memory. Tried to allocate 2.00 GiB"),
        make_result("zero2", 2, step=0.50, peak_gb=40.0),
        make_result("zero3", 2, status="error", error="rank 0: RuntimeError: NCCL timeout\nmore"),
        make_result("fsdp", 2, status="interrupted"),
        make_result("zero1", 2, status="running"),
    )
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "- **zero2** is the fastest that fits: *",
        "- It is the only configuration here that fits; nothing to choose between.",
        "- Did not fit: ddp (over the memory limit: 90.0 > 80.0 GB), zero0 (oom).",
        "- Did not finish: *fsdp (interrupted)*zero1 (still running (last heard of at *))*zero3 (error)*",
        "## Failed validation checks",
        "- `bench-h-ddp-ws2-seq128` **peak_memory**: ddp: peak reserved GPU memory 90.000 GB exceeds*",
        "## Runs that did not finish (OOM, error, interrupted, unfinished)",
        "- `bench-h-fsdp-ws2-seq128`: **interrupted** on rank 1",
        "- `bench-h-zero0-ws2-seq128`: **oom** on rank 1: "
        "rank 1: CUDA out of memory. Tried to allocate 2.00 GiB",
        # just written, by a session that recorded no owner: quiet for less than a live run may be
        "- `bench-h-zero1-ws2-seq128`: **still running (last heard of at *: its result.json's last write)**; "
        "no session recorded to ask*",
        "- `bench-h-zero3-ws2-seq128`: **error** on rank 1: rank 0: RuntimeError: NCCL timeout",
    )


def test_configuration_that_ran_out_of_memory_in_one_repeat_does_not_fit(tmp_path: Path) -> None:
    root = tmp_path / "r"
    write_runs(root, make_result("zero3", 2, step=0.8, peak_gb=30.0))
    write_run(root, make_result("ddp", 2, step=0.5, peak_gb=70.0))
    write_run(root, make_result("ddp", 2, status="oom", error="rank 0: CUDA out of memory"), repeat=2)
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    assert_lines(proc.stdout, "ddp *2 *1,024 *0.5000*70.0*ok 1/2, oom 1/2*")
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "- **zero3** is the fastest that fits: *",
        "- Did not fit: ddp (out of memory in 1 of 2 runs).",
    )


def test_scaling_without_one_gpu_run_says_its_baseline(tmp_path: Path) -> None:
    root = write_runs(
        tmp_path / "r",
        make_result("zero2", 2, step=0.50),
        make_result("zero2", 4, step=0.60),
    )
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    # T(4) / ((4/2) * T(2)) = (4/0.6) / (2 * 2/0.5) = 0.833
    assert_lines(proc.stdout, "zero2 *2 *1,024*baseline*", "zero2 *4 *1,707*83% (weak, vs ws2)*")
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md, "## Scaling", "| zero2 *| *4 | *1,707 | *83% | weak *| ws2 (smallest measured; no 1-GPU run) |"
    )


def test_strong_scaling_is_labelled(tmp_path: Path) -> None:
    # fixed global batch of 4 sequences: 1 GPU x batch 4, then 2 GPUs x batch 2
    root = write_runs(
        tmp_path / "r",
        make_result("ddp", 1, batch=4, step=1.0),
        make_result("ddp", 2, batch=2, step=0.6),
    )
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    # T(2) / (2 T(1)) = (512/0.6) / (2 * 512/1.0) = 0.833
    assert_lines(proc.stdout, "*ddp *2 *853*83% (strong, vs ws1)*")
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(md, "## Scaling", "| ddp *| *2 | *853 | *83% | strong *| ws1 (measured 1-GPU run) |")


def test_repeats_are_averaged_and_mixed_commits_are_said(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    for k, (step, commit) in enumerate([(0.50, "aaaaaaaaaaaa"), (0.40, "bbbbbbbbbbbb")], start=1):
        r = make_result("zero2", 2, step=step)
        r["metadata"]["git_commit"] = commit
        write_run(root, r, repeat=k)
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    # mean of 1,024 and 1,280 tokens/s; one row for the configuration, two rows in metrics.csv
    assert_lines(proc.stdout, "zero2 *2 *1,152 *0.4500*")
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    # results that name no session (written before sessions were) are one session, as before
    assert "> These runs come from 2 commits (aaaaaaaaaa, bbbbbbbbbb): a configuration run in several" in md
    with open(root / "summary" / "metrics.csv") as fh:
        assert [r["run"] for r in csv.DictReader(fh)] == [
            "bench-h-zero2-ws2-seq128",
            "bench-h-zero2-ws2-seq128-r2",
        ]


def test_two_sessions_of_one_configuration_are_not_averaged_as_repeats(tmp_path: Path) -> None:
    # the same command run twice into one folder: before 0.50 s a step, after the change 0.40 s,
    # and the second session repeated its run (two repeats of 0.40 and 0.42)
    root = tmp_path / "r"
    root.mkdir()
    runs = [("s-before", "2026-11-24T10:00:00+0000", 0.50), ("s-after", "2026-11-24T11:00:00+0000", 0.40)]
    runs.append(("s-after", "2026-11-24T11:01:00+0000", 0.42))
    for k, (session, started, step) in enumerate(runs, start=1):
        r = make_result("zero2", 2, step=step)
        r["metadata"].update(session=session, started_at=started)
        write_run(root, r, repeat=k)
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    # the newest session's two repeats only: mean of 1,280 and 1,219 tokens/s, never with the 1,024 before
    assert_lines(proc.stdout, "zero2 *2 *1,250 *0.4100*")
    warning = (
        "llmbench report: warning: zero2 ws2 llama-tiny seq128: runs from 2 sessions; read only the newest, "
        "session s-after (2 run(s)), and left out s-before (1 run(s), 2026-11-24T10:00:00+0000)."
    )
    assert warning in proc.stderr
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "> 1 configuration(s) ran in more than one session here; each is read from its newest" in md
    # compare (and the gate) read a folder the same way: the older session is not a repeat of the newer
    cmp = llmbench("compare", root)
    assert "warning: zero2 ws2 llama-tiny seq128: runs from 2 sessions; read only the newest" in cmp.stderr
    assert_lines(cmp.stdout, "zero2 ws2 * r *1,250 *")  # the newest session's mean, not 1,174


def test_cpu_results_are_labelled_smoke_with_host_rss_and_mfu_reason(tmp_path: Path) -> None:
    root = write_runs(
        tmp_path / "r",
        make_result("ddp", 1, device="cpu", peak_gb=0.53, step=0.12),
        make_result("zero2", 1, device="cpu", peak_gb=0.88, step=0.23),
    )
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stdout,
        "hardware CPU; *",
        "strategy*ranks*peak GB (host RSS)*",
        "CPU smoke: these runs show the code paths work; their speed is not a performance claim.",
        "MFU n/a: no GPU: MFU compares with a GPU's peak (pass --llmbench-peak-tflops to set one)",
    )
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert_lines(
        md,
        "> **CPU smoke: these runs show the code paths work; their speed is not a performance claim.** "
        "(2 of 2 runs ran on CPU; their memory is host RSS, not GPU memory.)",
        "### llama-tiny, seq 128, batch 2x1 per rank, fp32 on 1 CPU rank (CPU smoke)",
        "- CPU smoke: this ranking shows which code paths ran, not which strategy is faster on a GPU.",
        "- **ddp** *0.530 GB peak host RSS*",
        "No MFU for ddp ws1, zero2 ws1: no GPU: MFU compares with a GPU's peak*",
    )
    with open(root / "summary" / "metrics.csv") as fh:
        row = next(csv.DictReader(fh))
    assert row["peak_vram_gb"] == "" and float(row["peak_host_rss_gb"]) == pytest.approx(0.53)


def test_cpu_runs_get_no_poor_scaling_advice(tmp_path: Path) -> None:
    """Ranks on one CPU share its cores: scaling there says nothing of an interconnect, so the
    report gives no advice to check one (the scaling check gives no verdict either)."""
    root = write_runs(
        tmp_path / "r",
        make_result("ddp", 1, device="cpu", peak_gb=0.53, step=0.12),
        make_result("ddp", 2, device="cpu", peak_gb=0.60, step=0.48),  # 25% of linear
    )
    assert llmbench("report", root, "--no-plots").returncode == 0
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "### llama-tiny, seq 128, batch 2x1 per rank, fp32 on 2 CPU ranks (CPU smoke)" in md
    assert "poor scaling" not in md and "interconnect" not in md


def test_corrupt_result_is_named_and_the_rest_still_used(gpu_results: Path) -> None:
    bad = gpu_results / "bench-h-zero1-ws2-seq128_results" / "result.json"
    bad.parent.mkdir()
    bad.write_text('{"strategy": "zero1", "world_size": 2, "tokens_per')  # a job killed mid-write
    other = gpu_results / "notes_results" / "result.json"
    other.parent.mkdir()
    other.write_text("[1, 2, 3]")
    proc = llmbench("report", gpu_results, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stderr,
        f"llmbench report: warning: {bad}: truncated (*); left out",
        f"llmbench report: warning: {other}: not an llmbench result (no 'strategy' field); left out",
    )
    assert_lines(proc.stdout, "ddp *1 *512*", "zero3 *2 *427*")
    md = (gpu_results / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "2 result file(s) could not be read" in md
    assert_lines(md, "## Unreadable result files", f"- {bad}: truncated*")


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (
            lambda p: p / "nope",
            "llmbench report: error: results folder */nope does not exist. Pass the folder*",
        ),
        (
            lambda p: p,
            "llmbench report: error: no result.json under *: nothing to report. Run the benchmarks*",
        ),
    ],
    ids=["missing", "empty"],
)
def test_missing_or_empty_folder_is_one_clear_error(tmp_path: Path, make: Any, pattern: str) -> None:
    assert_one_line_error(llmbench("report", make(tmp_path)), pattern)


def test_every_file_unreadable_is_an_error_listing_them(tmp_path: Path) -> None:
    bad = tmp_path / "bench-h-ddp-ws1-seq128_results" / "result.json"
    bad.parent.mkdir()
    bad.write_text("")
    proc = llmbench("report", tmp_path)
    assert proc.returncode == 2
    assert "none of the 1 result.json files under" in proc.stderr and str(bad) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_subcommand_and_unknown_option_are_usage_errors(tmp_path: Path) -> None:
    proc = llmbench("report", tmp_path, "--plots-please")
    assert_one_line_error(
        proc, "llmbench: error: unrecognized arguments: --plots-please (see llmbench --help)"
    )
    assert llmbench().returncode == 2


def test_without_matplotlib_the_rest_is_written_with_the_install_hint(gpu_results: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # import matplotlib -> ImportError
        "from llmbench_pytest.cli import main; sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "report", str(gpu_results)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert_lines(
        proc.stderr,
        "llmbench report: warning: plots need matplotlib, which is not installed: "
        "pip install llmbench[[]plots]*",
    )  # [[] is a literal [ in fnmatch
    md = (gpu_results / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "Plots not drawn: plots need matplotlib" in md
    assert (gpu_results / "summary" / "metrics.csv").exists()


def test_python_api_for_the_pytest_plugin(gpu_results: Path, tmp_path: Path) -> None:
    from llmbench_pytest.report import summary_text, write_report

    out = tmp_path / "elsewhere"
    files = write_report(gpu_results, out, plots=False)
    assert files.out_dir == out and files.csv == out / "metrics.csv" and files.markdown.exists()
    assert files.paths == [files.csv, files.markdown]
    assert files.table == summary_text(gpu_results)
    assert "zero3" in files.table and files.warnings == []
    # a session reports its own runs only, not the earlier ones in the same folder
    mine = sorted(gpu_results.glob("bench-h-zero2-*/result.json"))
    only = write_report(gpu_results, tmp_path / "mine", plots=False, only=mine)
    assert "zero2" in only.table and "ddp" not in only.table and "zero3" not in only.table


def test_report_package_imports_no_heavy_modules() -> None:
    code = (
        "import sys, llmbench_pytest.report, llmbench_pytest.cli, llmbench_pytest.report.gate\n"
        "print(','.join(m for m in ('torch', 'matplotlib', 'numpy', 'deepspeed') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("llmbench")
    proc = subprocess.run(
        [str(script), "report", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.returncode == 0
    assert "Read every result.json under RESULTS_DIR and write RESULTS_DIR/summary/" in proc.stdout


def test_session_folders_are_read_as_sessions_and_named_by_report_compare_and_gate(tmp_path: Path) -> None:
    # results/ as sessions leave it: an old flat run (written before sessions had folders), two
    # session folders of the same configuration, and results/latest linking to the newer
    root = tmp_path / "results"
    flat = make_result("zero2", 2, step=0.60)
    flat["metadata"].update(session="0ld5e55n", started_at="2026-11-24T09:00:00+0000")
    write_run(root, flat)
    for folder, started, step in (
        ("20261124-100000-aaaa1111", "2026-11-24T10:00:00+0000", 0.50),
        ("20261124-110000-bbbb2222", "2026-11-24T11:00:00+0000", 0.40),
    ):
        r = make_result("zero2", 2, step=step)
        r["metadata"].update(session=folder[-8:], started_at=started)
        write_run(root / folder, r)
    (root / "latest").symlink_to("20261124-110000-bbbb2222")
    proc = llmbench("report", root, "--no-plots")
    assert proc.returncode == 0, proc.stderr
    assert_lines(proc.stdout, "zero2 *2 *1,280 *0.4000*")  # the newest session alone, never a mean of three
    assert (
        "read only the newest, session 20261124-110000-bbbb2222 (1 run(s)), and left out 0ld5e55n "
        "(1 run(s), 2026-11-24T09:00:00+0000), 20261124-100000-aaaa1111 (1 run(s), " in proc.stderr
    )
    md = (root / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "Read from session 20261124-110000-bbbb2222 (1 run)." in md
    # the count says what was read and what was left out, not one figure for both
    assert "1 result file read under" in md
    assert "(and 2 older sessions' runs of the same configurations, left out below)" in md
    # results/latest is the newest session's folder, read by its own name
    latest = llmbench("report", root / "latest", "--no-plots")
    assert latest.returncode == 0 and "warning" not in latest.stderr, latest.stderr
    assert (
        "Read from session 20261124-110000-bbbb2222 (1 run)."
        in (root / "latest" / "summary" / "BENCHMARK_REPORT.md").read_text()
    )
    # two sessions side by side, each named
    cmp = llmbench("compare", root / "20261124-100000-aaaa1111", root / "latest")
    assert cmp.returncode == 0, cmp.stderr
    assert "[read session 20261124-100000-aaaa1111 (1 run)]" in cmp.stdout
    assert "[read session 20261124-110000-bbbb2222 (1 run)]" in cmp.stdout
    assert_lines(cmp.stdout, "zero2 ws2 *20261124-100000-aaaa1111*1,024*ref*", "*latest*1,280*1.25x*")
    gate = llmbench("gate", "--baseline", root / "20261124-100000-aaaa1111", "--current", root / "latest")
    assert f"{root / 'latest'}: read session 20261124-110000-bbbb2222 (1 run)" in gate.stdout
