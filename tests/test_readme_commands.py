"""The commands of the README and the docs pages do what they say they do.

The Quick start's first run is read out of the README (not copied here), run once with a short
fixed measurement, and every file the section tells a newcomer to read is looked for where it
says, and its report is read for the choice it makes; then the commands of docs/reports.md and
docs/gate.md (report, compare, gate), the README's `pytest-benchmark compare` and docs/plan-and-
scale.md's `llmbench scale` run on what the first run wrote, and `llmbench plan` on its own.
docs/gpus-and-nodes.md's torchrun lines (one world size a session, two nodes with their own
rendezvous) run at CPU size, and its report over their sessions is read for the scaling it
promises; the `-k` expressions the Quick start gives are collected. Every command line of the
README and docs/*.md is either run here (RUN_HERE names the test) or named as one that needs GPUs
or runs elsewhere, with the reason: a page that gains a command no test knows fails. A README
that drifts from the code (a path that moved, a command that no longer runs or does something
else) fails here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CHILD_UNSET, FEW_STEPS, REPO, RUNS, TORCH_EXTENSIONS_DIR, start_torchrun, trained_once
from llmbench_pytest import readme
from llmbench_pytest.config.spec import DEFAULT_STRATEGIES
from llmbench_pytest.results.storage import is_session_folder

README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"


def page(name: str) -> str:
    """docs/NAME, where the README sends a reader for the rest."""
    return (DOCS / name).read_text()


FIRST_RUN = "readme_first_run"
"""The Quick start's first run, trained once for the tests that read what it wrote."""
MIN_STEPS = 8
"""Measured steps of each run here: a short fixed window, the same in every session."""
MEASURED = ["--llmbench-warmup=1", f"--llmbench-steps={MIN_STEPS}"]
"""A short fixed measurement with as many steps as the gate needs to judge one run a side from its
step times (fewer, and it has only the bound)."""


def commands(section: str, program: str) -> list[list[str]]:
    """The command lines of SECTION's bash blocks that start with PROGRAM, comments dropped."""
    found, fenced = [], None
    for line in section.splitlines():
        if line.startswith("```"):
            fenced = None if fenced is not None else line[3:].strip()
            continue
        if fenced == "bash" and line.startswith(program + " "):
            found.append(shlex.split(line, comments=True))
    return found


def paths_to_read(section: str) -> list[str]:
    """The files and folders under results/ the section names in backticks."""
    return sorted(set(re.findall(r"`(results/[^`\s]+)`", section)))


@pytest.fixture
def first_run(shared_bench):
    """The Quick start's first run, as the README gives it, with a short fixed measurement, and
    saved to pytest-benchmark's storage (`.benchmarks/`) for the gate: (its directory, its result)."""
    command = first_command()
    assert command[:2] == ["pytest", "benchmarks/test_pretrain.py"], command
    return trained_once(shared_bench, FIRST_RUN, *command[1:], *MEASURED, "--benchmark-autosave")


def llmbench(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """An `llmbench ...` command line of the README, run in CWD."""
    assert command[0] == "llmbench", command
    return subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", *command[1:]],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one(found: list[list[str]], *lead: str) -> list[str]:
    """The one command line of FOUND that starts `llmbench LEAD...`."""
    (command,) = (c for c in found if c[1 : 1 + len(lead)] == list(lead))
    return command


def lines_with(text: str, *words: str) -> list[str]:
    return [line for line in text.splitlines() if all(w in line for w in words)]


def table_row(text: str, strategy: str, ws: int, metric: str) -> str:
    """The gate table's row of the first run's STRATEGY at world size WS, for METRIC."""
    (row,) = (line for line in text.splitlines() if line.startswith(f"{strategy} ws{ws} ") and metric in line)
    return row


def first_command() -> list[str]:
    """The Quick start's first run: its one pytest command line."""
    (command,) = commands(readme.section(README, "Quick start"), "pytest")
    return command


def first_strategies() -> list[str]:
    """The strategies the first run names (--llmbench-strategies=...)."""
    (names,) = (a.split("=", 1)[1] for a in first_command() if a.startswith("--llmbench-strategies="))
    return names.split(",")


def markdown_section(text: str, title: str, level: int = 2) -> str:
    """The part of a markdown report from its heading TITLE down to the next heading of its level."""
    head = "#" * level + " "
    lines = text.splitlines()
    (start,) = (i for i, line in enumerate(lines) if line == head + title)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(head)), len(lines))
    return "\n".join(lines[start:end])


@pytest.mark.xdist_group(FIRST_RUN)
def test_the_quick_start_first_run_writes_what_the_readme_says(first_run):
    bench, result = first_run
    # "It trains llama-tiny with three strategies, DDP, FSDP (FSDP2, full sharding) and DeepSpeed
    # ZeRO-2, at one rank and at two: six configurations. It checks each run, prints a table of
    # tokens/s, step time, peak memory and scaling"
    strategies = first_strategies()
    assert len(strategies) >= 3, strategies  # a first run that compares
    quick = readme.section(README, "Quick start")
    result.assert_outcomes(passed=2 * len(strategies))
    rows = [f"{s} * {ws} *" for ws in (1, 2) for s in strategies]
    result.stdout.fnmatch_lines(["*strategy*ranks*tokens/s*step s*peak GB*scaling*", *rows])
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
    assert len(runs) == 2 * len(strategies) and all((r.parent / "rank0.log").is_file() for r in runs)
    # the report command the README gives for a finished session
    report = one(commands(page("reports.md"), "llmbench"), "report")
    out = bench.run(sys.executable, "-m", "llmbench_pytest.cli", *report[1:], "--no-plots")
    assert out.ret == 0, out.stderr
    out.stdout.fnmatch_lines(["*zero2 * 2 *", "wrote *results/latest/summary/metrics.csv"])


@pytest.mark.xdist_group(FIRST_RUN)
def test_the_first_runs_report_chooses_a_strategy_at_each_world_size(first_run):
    """The first run exists to answer the tool's question: "a report that names, for each world
    size, the fastest strategy that fits and the most memory-frugal one" (or those it cannot tell
    apart, and which it names and why). A run of one strategy said "nothing to choose between"."""
    bench, _ = first_run
    strategies = first_strategies()
    text = (bench.path / "results" / "latest" / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "nothing to choose between" not in text, text
    recommendation = markdown_section(text, "Recommendation")
    scenarios = recommendation.split("\n### ")[1:]
    assert len(scenarios) == 2, recommendation  # one rank, two ranks
    named = "|".join(map(re.escape, strategies))
    for ranks, scenario in zip(("1 CPU rank", "2 CPU ranks"), scenarios, strict=True):
        assert scenario.splitlines()[0].endswith(f"on {ranks} (CPU smoke)"), scenario
        flat = " ".join(scenario.split())
        chose = re.search(rf"\*\*({named})\*\* is the fastest that fits", flat)
        # a tie: the strategies it cannot tell apart, then the one named and why
        picked = re.search(rf"\*\*({named})\*\* is (chosen|named) ", flat)
        tied = "are tied on speed" in flat and picked
        assert chose or tied, scenario
        assert "needs the least memory" in flat, scenario  # the most memory-frugal one, named
    # the summary table names one strategy per world size as the fastest that fits
    glance = markdown_section(text, "At a glance")
    cells = [line.split("|")[2].strip() for line in glance.splitlines() if "CPU rank" in line]
    assert len(cells) == 2 and all(c.split()[0] in strategies for c in cells), glance


def slowed(session: Path, into: Path, factor: float = 2.0) -> None:
    """A copy of SESSION's runs as if every step took FACTOR times as long, in a session of its own."""
    shutil.copytree(session, into, ignore=shutil.ignore_patterns("summary"))
    for path in into.glob("*/result.json"):
        d = json.loads(path.read_text())
        d["metadata"]["session"] = "5105ed00"
        for key in ("mean_step_time_sec", "step_time_median_sec", "step_time_min_sec", "step_time_max_sec"):
            d[key] *= factor
        d["step_time_std_sec"] *= factor
        d["step_times_sec"] = [t * factor for t in d["step_times_sec"]]
        d["tokens_per_sec"] /= factor
        d["samples_per_sec"] /= factor
        path.write_text(json.dumps(d))


@pytest.mark.xdist_group(FIRST_RUN)
def test_the_compare_and_gate_commands_do_what_the_readme_says(first_run, tmp_path):
    bench, _ = first_run
    found = commands(page("reports.md"), "llmbench") + commands(page("gate.md"), "llmbench")
    session = (bench.path / "results" / "latest").resolve()
    runs = {
        (d["strategy"], d["world_size"]): d
        for d in map(json.loads, map(Path.read_text, session.glob("*/result.json")))
    }
    assert sorted(runs) == sorted((s, ws) for s in first_strategies() for ws in (1, 2))

    # `llmbench compare results-h100/ results-h200/ --cost 3.00 5.50`: per configuration, with $ per
    # 1M tokens; here both inputs hold the first run's session
    compare, with_markdown = (c for c in found if c[1] == "compare")  # the second adds --markdown
    for folder in compare[2:4]:
        shutil.copytree(session, tmp_path / folder, ignore=shutil.ignore_patterns("summary"))
    out = llmbench(compare, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    price = float(compare[compare.index("--cost") + 1])
    for (strategy, ws), d in runs.items():
        # the table's row (a sentence about the same configuration may follow the table)
        folder = re.escape(compare[2].rstrip("/"))
        (row,) = (r for r in out.stdout.splitlines() if re.match(rf"{strategy} ws{ws} [^:]*\s{folder}\s", r))
        shown = re.findall(r"\$([0-9.,]+)", row)[0]
        # $ per 1M tokens = price per GPU-hour x world size / 3600 / tokens per second x 1,000,000
        expected = price * ws / 3600 / d["tokens_per_sec"] * 1e6
        # the table shows cents from $1 up and four decimals below: the figure is right to half its
        # last digit (a fixed relative tolerance failed on a CPU fast enough to land near $1.00)
        last_digit = 10.0 ** -len(shown.partition(".")[2])
        assert abs(float(shown.replace(",", "")) - expected) <= last_digit / 2 + 1e-9, row
    # ... and the same with --markdown FILE: the table written there too
    out = llmbench(with_markdown, tmp_path)
    written = tmp_path / with_markdown[with_markdown.index("--markdown") + 1]
    assert out.returncode == 0 and "$" in written.read_text(), out.stdout + out.stderr
    # the second input, against the first: the same speed, its own price
    second = [r for r in lines_with(out.stdout, compare[3].rstrip("/"), "1.00x", "$") if r.startswith(" ")]
    assert len(second) == len(runs), out.stdout

    # `llmbench gate --baseline .benchmarks --current results/latest`: right after the session's own
    # --benchmark-autosave the newest saved run is the current run itself, refused in one line
    gate = one(found, "gate", "--baseline")
    assert gate[2:] == ["--baseline", ".benchmarks", "--current", "results/latest"], gate
    out = llmbench(gate, bench.path)
    assert out.returncode == 2 and "is the current run itself" in out.stderr, out.stdout + out.stderr
    # ... and in a later session, the change, interval, p-value and method per metric, exit 1 on a
    # regression beyond a bound: every step ten times as long, against the spread between sessions
    shutil.copytree(bench.path / ".benchmarks", tmp_path / ".benchmarks")
    slowed(session, tmp_path / "results" / "latest", factor=10.0)
    out = llmbench(gate, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert lines_with(out.stdout, "configuration", "change", "95% interval", "p", "verdict", "method")
    verdicts = []
    for strategy, ws in runs:
        row = table_row(out.stdout, strategy, ws, "tokens/s")
        assert "-90.0%" in row and "t on session means" in row, out.stdout
        verdicts.append("REGRESSION" in row)
        # one session a side: a run whose own steps were wild (a loaded 2-core CPU: a session mean
        # known to +-43%) is inconclusive at alpha 0.01, and the row says that noise was used
        noisy = "inconclusive" in row and "inside one session (larger, used)" in row
        assert "REGRESSION" in row or noisy, row
    assert sum(verdicts) >= len(runs) // 2, out.stdout
    assert "gate: FAILED" in out.stdout, out.stdout

    # `llmbench gate --history .benchmarks --current results/latest`: the last 20 saved runs; the
    # only one there is the first run's own, which is not its own history
    history = one(found, "gate", "--history")
    out = llmbench(history, bench.path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "History (.benchmarks, up to 20 earlier runs per configuration)" in out.stdout, out.stdout


@pytest.mark.xdist_group("step_traces")  # with the other tests that trace steps: each traced once
def test_llmbench_plan_prints_what_the_readme_says(tmp_path):
    """docs/plan-and-scale.md, *Will it fit*: per strategy the predicted peak per rank in its parts,
    allocated and reserved (allocated x 1.11), whether it fits and the largest batch that fits; on
    this CPU, in seconds."""
    fit = readme.section(page("plan-and-scale.md"), "Will it fit")
    plans = commands(fit, "llmbench")
    assert [c[:2] for c in plans] == [["llmbench", "plan"]] * 2, plans
    env = {}  # the suite's trace cache (conftest.py): llama-1b's steps are traced once for the suite
    out = llmbench(plans[0], tmp_path, env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"{plans[0][2]} on 1 x H100"), out.stdout
    (header,) = lines_with(out.stdout, "strategy", "fits")
    for column in ("states", "activ.", "temp.", "buffers", "alloc.", "reserved", "fits", "largest batch"):
        assert column in header, header
    cells = [line.split() for line in out.stdout.splitlines()]
    rows = {c[0]: c for c in cells if c and c[0] in DEFAULT_STRATEGIES}
    assert sorted(rows) == sorted(DEFAULT_STRATEGIES), out.stdout  # "the default strategies"
    for cells in rows.values():
        states, activ, temp, buffers, alloc, reserved = map(float, cells[1:7])
        assert alloc == pytest.approx(states + activ + temp + buffers, abs=0.03), cells
        assert reserved == pytest.approx(alloc * 1.11, abs=0.02), cells
        assert cells[7] in ("yes", "no") and cells[8].isdigit(), cells
    # the second: another model, GPU count and length, and the chart
    out = llmbench(plans[1], tmp_path, env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"{plans[1][2]} on 8 x "), out.stdout
    assert "x 4096 tokens" in out.stdout.splitlines()[0], out.stdout
    asked = plans[1][plans[1].index("--strategies") + 1].split(",")
    cells = [line.split() for line in out.stdout.splitlines()]
    printed = [c[0] for c in cells if c and c[0] in DEFAULT_STRATEGIES]
    assert printed == asked, out.stdout  # the strategies asked for, in that order, and no others
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def collected_strategies(bench, expression: str) -> set[str]:
    """The strategies of the benchmarks `pytest benchmarks/ -k EXPRESSION` collects."""
    out = bench.runpytest_subprocess("benchmarks", "--collect-only", "-q", "-k", expression)
    ids = [line.partition("[")[2] for line in out.outlines if "::" in line]
    assert ids, out.outlines
    return {i.partition("-ws")[0] for i in ids}


def test_the_k_expressions_and_collect_only_do_what_they_say(bench):
    # "`-k zero2` selects `zero2_offload` too, and `-k fsdp` selects `fsdp_grad_op` too; `-k "fsdp
    # and not grad_op"` selects `fsdp` alone": collection only, nothing trains
    quick = " ".join(readme.section(README, "Quick start").split())
    too = re.findall(r"`-k (\w+)` selects `(\w+)` too", quick)
    alone = re.findall(r'`-k "([^"]+)"` selects `(\w+)` alone', quick)
    assert ("fsdp", "fsdp_grad_op") in too and alone, quick
    for expression, also in too:
        assert {expression, also} <= collected_strategies(bench, expression), expression
    for expression, strategy in alone:
        assert collected_strategies(bench, expression) == {strategy}, expression
    # docs/gpus-and-nodes.md: "how many configurations that is, before anything trains"
    (count,) = (c for c in commands(page("gpus-and-nodes.md"), "pytest") if "--collect-only" in c)
    out = bench.runpytest_subprocess(*count[1:])
    assert out.ret == 0 and re.search(r"^\d+ tests? collected", out.outlines[-1]), out.outlines[-3:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CPU_SIZE = ["-k", "test_pretrain", "--llmbench-strategies=ddp", *FEW_STEPS, "-p", "no:cacheprovider"]
"""What narrows a README torchrun line to one small configuration on this CPU."""


def test_sessions_of_one_world_size_each_give_scaling_in_one_report(bench):
    """docs/gpus-and-nodes.md: the lines that run one world size a session into one folder, one
    of them on two nodes with their own rendezvous (here two torchrun agents on this machine, one
    rank each), then `llmbench report` over the folder: scaling against the world-size-1 session."""
    section = readme.section(page("gpus-and-nodes.md"), "Scaling from torchrun")
    lines = commands(section, "torchrun")
    folder = "--llmbench-results-dir=results/scaling"
    single = [c for c in lines if folder in c and "--nproc_per_node=1" in c]
    nodes = [c for c in lines if folder in c and "--nnodes=2" in c]
    assert len(single) == 1 and len(nodes) == 1, lines
    (report,) = commands(section, "llmbench")
    assert report == ["llmbench", "report", "results/scaling"], report

    def run(command: list[str], log: str, subs: dict[str, str] | None = None) -> subprocess.Popen:
        argv = command[1:]
        for old, new in (subs or {}).items():  # $HEAD:29500 and the like, inside an argument
            argv = [a.replace(old, new) for a in argv]
        # output to a file, not a pipe: a node's full pipe would stall the rendezvous of both. The
        # ranks are what the line starts, new `python -m pytest` processes: the other in-rank tests
        # fork theirs (conftest.torchrun), and these keep a user's way of starting them tested
        return start_torchrun([*argv, *CPU_SIZE], bench.path, bench.path / log, fork_ranks=False)

    def finish(agents: list[subprocess.Popen], logs: list[str]) -> list[str]:
        codes = [a.wait(timeout=300) for a in agents]
        outputs = [(bench.path / log).read_text() for log in logs]
        assert codes == [0] * len(agents), "\n".join(o[-3000:] for o in outputs)
        return outputs

    # world size 1, then 2 on two "nodes": each line as the README has it, the GPUs of a node one
    # CPU rank, $HEAD this machine, a free port for 29500
    finish([run(single[0], "ws1.log")], ["ws1.log"])
    port = str(free_port())
    size = {"--nproc_per_node=8": "--nproc_per_node=1", "$HEAD": "127.0.0.1", "29500": port}
    logs = ["node0.log", "node1.log"]
    outputs = finish([run(nodes[0], logs[r], {**size, "$NODE_RANK": str(r)}) for r in (0, 1)], logs)
    # "Global rank 0 runs on the node with NODE_RANK 0: it alone prints and writes the results"
    assert "1 passed" in outputs[0] and "passed" not in outputs[1], outputs
    found = {}
    for path in bench.path.glob(f"{RUNS.replace('results/', 'results/scaling/')}/*_results/result.json"):
        d = json.loads(path.read_text())
        found[d["world_size"]] = d
        # the session judged its own run only: at one world size its scaling check has no verdict
        (scaling,) = [c for c in d["checks"] if c["name"] == "scaling"]
        assert scaling["passed"] is None, scaling
    assert sorted(found) == [1, 2] and found[2]["nodes"] == 2, found
    assert found[1]["metadata"]["session"] != found[2]["metadata"]["session"]

    # "its Scaling table puts each world size against the same configuration at world size 1, from
    # its own session: T(N) / (N x T(1)), its baseline 'ws1 (measured 1-rank run)'"
    done = llmbench([*report, "--no-plots"], bench.path)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (bench.path / "results" / "scaling" / "summary" / "BENCHMARK_REPORT.md").read_text()
    table = markdown_section(text, "Scaling")
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, table  # a header, its rule and a row: scaling across the sessions
    header, _, *rows = lines
    names = [c.strip() for c in header.strip("|").split("|")]
    (row,) = [dict(zip(names, (c.strip() for c in r.strip("|").split("|")), strict=True)) for r in rows]
    assert row["strategy"] == "ddp" and row["world size"] == "2", table
    assert row["baseline"].startswith("ws1 (measured 1-rank run)"), table
    efficiency = float(row["efficiency"].rstrip("%")) / 100
    expected = found[2]["tokens_per_sec"] / (2 * found[1]["tokens_per_sec"])
    assert efficiency == pytest.approx(expected, abs=0.006), (table, expected)


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


@pytest.mark.xdist_group(FIRST_RUN)
def test_pytest_benchmark_compare_reads_two_saved_runs(first_run, tmp_path):
    """The README's `pytest-benchmark compare`: pytest-benchmark's own CLI on storage a real run
    wrote (the first run, saved with --benchmark-autosave; here its saved file twice, as two runs)."""
    bench, _ = first_run
    ways = readme.section(README, "Saved runs side by side")
    save, compare = commands(ways, "pytest")[0], commands(ways, "pytest-benchmark")[0]
    storage = next(a.split("=", 1)[1] for a in save if a.startswith("--benchmark-storage="))
    assert "--benchmark-autosave" in save and compare[1:3] == ["--storage", storage], (save, compare)
    (saved,) = (bench.path / ".benchmarks").glob("*/0001_*.json")
    machine = tmp_path / storage / saved.parent.name
    machine.mkdir(parents=True)
    for counter in compare[4:6]:  # 0001 0002
        shutil.copy(saved, machine / saved.name.replace("0001_", f"{counter}_", 1))
    cli = Path(sys.executable).with_name("pytest-benchmark")
    done = subprocess.run([str(cli), *compare[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    strategies = first_strategies()
    for strategy in strategies:  # one table per configuration, each with both saved runs
        header = f"benchmark 'test_pretrain[{strategy}-ws1-seq128-llama-tiny]': 2 tests"
        assert header in done.stdout, done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("test_pretrain[")]
    assert len(rows) == 2 * 2 * len(strategies), done.stdout  # two world sizes, two saved runs
    assert "Name (time in ms)" in done.stdout and "Rounds" in done.stdout


@pytest.mark.xdist_group(FIRST_RUN)
def test_the_scale_commands_predict_from_the_first_run(first_run, tmp_path):
    """docs/plan-and-scale.md's `llmbench scale` lines on the first run's session (one and two CPU
    ranks): the first asks for the network beyond a node, the others predict and write."""
    bench, _ = first_run
    lines = commands(readme.section(page("plan-and-scale.md"), "How fast at 64"), "llmbench")
    assert [c[:3] for c in lines] == [["llmbench", "scale", "results/latest"]] * 3, lines
    shutil.copytree(bench.path / "results", tmp_path / "results", symlinks=True)
    asks = llmbench(lines[0], tmp_path)
    assert asks.returncode == 2 and "name the network between them" in asks.stderr, asks.stderr
    for command in lines[1:]:
        done = llmbench(command, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "link inside a node: measured by the session's probe" in done.stdout, done.stdout
    assert (tmp_path / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    predicted = json.loads((tmp_path / "scale.json").read_text())
    sizes = {p["world_size"] for c in predicted["configurations"] for p in c["predictions"]}
    assert {16, 64, 512} <= sizes, sizes


def doc_commands() -> dict[str, list[str]]:
    """Every command line of the README's and docs/*.md's bash blocks (comments dropped, a line
    continued with a backslash joined, spaces collapsed), with the pages it is on."""
    found: dict[str, list[str]] = {}
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        fenced, pending = None, ""
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("```"):
                fenced = None if fenced is not None else line.strip()[3:]
                continue
            if fenced not in ("bash", "sh") or line.strip().startswith("#"):
                continue
            text = pending + line.split(" #")[0].strip()
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending, text = "", " ".join(text.split())
            if text:
                found.setdefault(text, []).append(str(path.relative_to(REPO)))
    return found


FIRST = " ".join(first_command())
SCALING = "-m pytest benchmarks/test_pretrain.py --llmbench-results-dir=results/scaling"
NODES = "torchrun --nnodes=2 --node-rank=$NODE_RANK --nproc_per_node=8 --rdzv-endpoint=$HEAD:29500"
SAVE = f"{' '.join(first_command()[:3])} --benchmark-autosave --benchmark-storage=bench-runs"
COMPARE = "pytest-benchmark --storage bench-runs compare 0001 0002 --group-by=name"
PLAN_7B = "llmbench plan llama-7b --gpu 80GiB --gpus 8 --seq-len 4096 --strategies fsdp,zero2,zero3"
SCALE = "llmbench scale results/latest"
TTA = "python tools/time_to_answer.py"
T_FIRST = "test_the_quick_start_first_run_writes_what_the_readme_says"
T_GATE = "test_the_compare_and_gate_commands_do_what_the_readme_says"
T_PLAN = "test_llmbench_plan_prints_what_the_readme_says"
T_SCALE = "test_the_scale_commands_predict_from_the_first_run"
T_SESSIONS = "test_sessions_of_one_world_size_each_give_scaling_in_one_report"
T_BENCH = "test_pytest_benchmark_compare_reads_two_saved_runs"
RUN_HERE = {
    FIRST: T_FIRST,
    "make bench": "test_make_bench_with_small_settings_names_the_report_it_wrote (narrowed with ARGS)",
    SAVE: f"first_run (the first run, with --benchmark-autosave) and {T_BENCH}",
    f"{COMPARE} --columns=min,median,mean,stddev,rounds": T_BENCH,
    "llmbench report results/latest": T_FIRST,
    "llmbench compare results-h100/ results-h200/ --cost 3.00 5.50": T_GATE,
    "llmbench compare results-h100/ results-h200/ --cost 3.00 5.50 --markdown comparison.md": T_GATE,
    "llmbench gate --baseline .benchmarks --current results/latest": T_GATE,
    "llmbench gate --history .benchmarks --current results/latest": T_GATE,
    "llmbench plan llama-1b --gpu H100": T_PLAN,
    f"{PLAN_7B} --plot plan.png": T_PLAN,
    SCALE: T_SCALE,
    f"{SCALE} --network 400G --plot scale.png": T_SCALE,
    f"{SCALE} --network-gbps 40 --network-latency-us 8 --world-sizes 16,64,512 --json scale.json": T_SCALE,
    f"torchrun --nproc_per_node=1 {SCALING}": T_SESSIONS,
    f"{NODES} {SCALING}": f"{T_SESSIONS} (two agents, one rank each)",
    "llmbench report results/scaling": T_SESSIONS,
    "pytest benchmarks/ --collect-only -q": "test_the_k_expressions_and_collect_only_do_what_they_say",
}
"""The command lines a test of this file runs, each with the test."""
GPU_ONLY = {
    "torchrun --nproc_per_node=8 -m pytest benchmarks/ -k zero2": "8 GPUs (in-rank mode at CPU size: "
    "the scaling lines, tests/test_torchrun.py)",
    f"torchrun --nproc_per_node=2 {SCALING}": "2 GPUs (the same line at 1 rank and on two agents runs here)",
    f"torchrun --nproc_per_node=4 {SCALING}": "4 GPUs",
    f"torchrun --nproc_per_node=8 {SCALING}": "8 GPUs",
    f"{NODES} -m pytest benchmarks/": "two nodes of 8 GPUs (the two-node rendezvous runs here at CPU size)",
    f"{NODES} -m pytest benchmarks/ --llmbench-report": "two nodes of 8 GPUs",
    "pytest benchmarks/ -k zero2 --llmbench-world-sizes=1,2,4,8": "8 GPUs",
    "pytest benchmarks/ -n auto": "a multi-GPU node (pytest-xdist at CPU size: tests/test_xdist.py)",
    "pytest benchmarks/ --benchmark-autosave": "the GPU runner that gates CI (refreshing its baseline)",
    f"{TTA} --goal-wall 150 --goal-share 0.6 -- pytest benchmarks/test_pretrain.py": "1x H100 "
    "(the tool: tests/test_time_to_answer_tool.py)",
    "python tools/gate_error_rates.py collect DIR --label a --sessions 120 --strategies ddp,zero2": "240 "
    "sessions, about 30 min of the 2-core VM (docs/results/2026-11-28-gate-error-rates; the tool's own "
    "small run: tests/test_tools_hygiene.py)",
    "python tools/gate_error_rates.py collect DIR --label b --sessions 120 --strategies ddp --slow ddp:10% "
    "--reference DIR": "the B half of the sessions above",
    "python tools/gate_error_rates.py analyse DIR": "the sessions above",
}
"""The command lines that need GPUs (or hours of them), with what they need."""
ELSEWHERE = {
    "make test": "the plugin's own tests: .ci/run runs it",
    "make setup": "every make target's first step; .ci/run and the make bench test run it",
    ". .venv/bin/activate": "the shell's, not a command of llmbench",
    "pytest": "the plugin's own tests, what make test runs",
    "pytest --shuffle-seed=123456 -n 3 --dist loadgroup": "the plugin's own tests in a replayed order",
    "pytest benchmarks/": "the whole default suite (make bench; narrowed here by the make bench test)",
    "pytest benchmarks/ --llmbench-report": "the whole default suite with its report: make bench",
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": "ci/github-actions.yml",
    "pip install torch": "an NVIDIA GPU machine",
    "pip install -e .": "ci/github-actions.yml's cpu-smoke; tools/dev.sh",
    'pip install -e ".[gpu]"': "ci/github-actions.yml's gpu-benchmarks (a GPU machine)",
    'pip install -e ".[fp8]"': "installs torchao, which make setup installs too",
    'pip install -e ".[test]"': "tools/dev.sh (make test)",
    f"{TTA} --json tta.json -- pytest benchmarks/test_pretrain.py --llmbench-world-sizes=1,2": "the "
    "default pre-training suite, timed (the tool: tests/test_time_to_answer_tool.py)",
}
"""The command lines no test here runs, with where they run instead."""


def test_every_command_of_the_readme_and_docs_is_run_here_or_named():
    found = doc_commands()
    named = {**RUN_HERE, **GPU_ONLY, **ELSEWHERE}
    assert len(named) == len(RUN_HERE) + len(GPU_ONLY) + len(ELSEWHERE), "a command is named twice"
    unknown = {c: pages for c, pages in found.items() if c not in named}
    assert not unknown, f"commands no test runs or names (add a test, or name them in GPU_ONLY): {unknown}"
    stale = sorted(set(named) - set(found))
    assert not stale, f"named here, on no page any more: {stale}"
    # a test named as running a command exists in this file
    tests = {name for name in globals() if name.startswith("test_")} | {"first_run"}
    assert all(why.split()[0] in tests for why in RUN_HERE.values()), RUN_HERE
