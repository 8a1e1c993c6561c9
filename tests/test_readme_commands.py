"""The README's first commands do what the README says they do.

The Quick start's first run is read out of the README (not copied here), run with a short fixed
measurement, and every file the section tells a newcomer to read is looked for where it says;
then the report command of *Reports, machine and price comparison* runs on what the first run
wrote. A README that drifts from the code (a path that moved, a command that no longer runs)
fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from conftest import CHILD_UNSET, FEW_STEPS, REPO, TORCH_EXTENSIONS_DIR
from llmbench_pytest import readme
from llmbench_pytest.results.storage import is_session_folder

README = (REPO / "README.md").read_text()


def commands(section: str, program: str) -> list[list[str]]:
    """The command lines of SECTION's bash blocks that start with PROGRAM, comments dropped."""
    found, fenced = [], False
    for line in section.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced and line.startswith(program + " "):
            found.append(shlex.split(line, comments=True))
    return found


def paths_to_read(section: str) -> list[str]:
    """The files and folders under results/ the section names in backticks."""
    return sorted(set(re.findall(r"`(results/[^`\s]+)`", section)))


def test_the_quick_start_first_run_writes_what_the_readme_says(bench):
    quick = readme.section(README, "Quick start")
    (first_run,) = commands(quick, "pytest")
    assert first_run[:2] == ["pytest", "benchmarks/test_pretrain.py"], first_run
    result = bench.runpytest_subprocess(*first_run[1:], *FEW_STEPS)
    # "It trains llama-tiny with ZeRO-2 at one rank and at two, checks each run, and prints a
    # table of tokens/s, step time, peak memory and scaling."
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*strategy*ranks*tokens/s*step s*peak GB*scaling*", "zero2 * 1 *", "zero2 * 2 *"]
    )
    # "Then read:" every path the section names, where it names it
    named = paths_to_read(quick)
    assert "results/latest/summary/BENCHMARK_REPORT.md" in named, named
    for path in named:
        if "<" in path:  # results/<UTC start>-<session id>/: a description, not a path
            continue
        # an example session folder (results/20261125-173134-fbb53b17/) stands for this run's
        parts = path.rstrip("/").split("/")
        pattern = "/".join("[0-9]*-*" if is_session_folder(p) else p for p in parts)
        hits = list(bench.path.glob(pattern))
        assert hits, f"the Quick start says to read {path}; the first run wrote no such thing"
    runs = list(bench.path.glob("results/latest/*/result.json"))
    assert len(runs) == 2 and all((r.parent / "rank0.log").is_file() for r in runs)
    # the report command the README gives for a finished session
    reports = readme.section(README, "Reports, machine and price comparison")
    (report,) = (c for c in commands(reports, "llmbench") if c[1] == "report")
    out = bench.run(sys.executable, "-m", "llmbench_pytest.cli", *report[1:], "--no-plots")
    assert out.ret == 0, out.stderr
    out.stdout.fnmatch_lines(["*zero2 * 2 *", "wrote *results/latest/summary/metrics.csv"])


def test_make_bench_with_small_settings_names_the_report_it_wrote(tmp_path):
    # the Quick start's `make bench ARGS=...` form, narrowed to one pretraining run with a short
    # fixed measurement, into a folder of the test's own: its last lines name the session's report
    quick = readme.section(README, "Quick start")
    assert "make bench ARGS='-k \"zero2 and not offload\" --llmbench-world-sizes=1,2'" in quick
    results = tmp_path / "results"
    args = f'-k "test_pretrain and zero2 and not offload" --llmbench-world-sizes=1 {" ".join(FEW_STEPS)}'
    args += f" --llmbench-results-dir={results}"
    done = subprocess.run(
        ["make", "--no-print-directory", "bench", f"ARGS={args}"],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
        | {"TORCH_EXTENSIONS_DIR": TORCH_EXTENSIONS_DIR},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = results / "latest" / "summary" / "BENCHMARK_REPORT.md"
    assert f"Report:  {report}" in done.stdout, done.stdout[-2000:]
    assert report.is_file() and "zero2" in report.read_text()
    assert len(list((results / "latest").glob("*_results/result.json"))) == 1
