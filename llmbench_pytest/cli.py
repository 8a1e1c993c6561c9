"""The `llmbench` command: report, compare and gate over saved benchmark results.

    llmbench report results/latest                    summary/metrics.csv, BENCHMARK_REPORT.md, plots/
    llmbench compare h100/ h200/ --cost 3.00 5.50     the same configurations side by side, with prices
    llmbench gate --baseline .benchmarks --current results/latest   exit 1 on a regression
    llmbench ops                                      build DeepSpeed's JIT ops ahead of the sessions
    llmbench readme "Validation checks"               the README as installed, or one section of it

Bad input is one line on stderr that says what to fix, and exit status 2; no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import __version__
from .config.spec import DEFAULT_STRATEGIES, STRATEGIES, SpecError, offload_variants
from .report.collect import ReportError

if TYPE_CHECKING:
    from collections.abc import Sequence

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line naming the command's --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _report(args: argparse.Namespace) -> int:
    from .report.summary.build import write_report

    files = write_report(args.results_dir, args.out, plots=not args.no_plots)
    for w in files.warnings:
        print(f"llmbench report: warning: {w}", file=sys.stderr)
    if not args.quiet:
        print(files.table)
        print()
    print(f"wrote {files.csv}")
    print(f"wrote {files.markdown}")
    if files.plots:
        print(f"wrote {len(files.plots)} plots under {files.plots[0].parent}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from .report.compare import compare, load_inputs

    inputs = load_inputs(args.inputs, args.cost, args.sessions)
    for i in inputs:
        for p in i.records.problems:
            print(f"llmbench compare: warning: {p}", file=sys.stderr)
    result = compare(inputs)
    print(result.format())
    if args.markdown:
        Path(args.markdown).write_text(result.markdown())
        print(f"\nwrote {args.markdown}")
    return 0


def _gate(args: argparse.Namespace) -> int:
    from .config.gate_bounds import parse_alpha, parse_bound, parse_history
    from .report.gate import GateBounds, load_inputs, run_gate

    if not args.baseline and not args.history:
        raise ReportError("nothing to compare with: pass --baseline B, --history DIR, or both")
    alpha = parse_alpha(args.alpha, "--alpha")
    bounds = GateBounds(
        tokens_drop=parse_bound(args.max_tokens_drop, "--max-tokens-drop"),
        step_time_rise=parse_bound(args.max_step_time_rise, "--max-step-time-rise"),
        memory_rise=parse_bound(args.max_memory_rise, "--max-memory-rise"),
        alpha=alpha,
        fail_inconclusive=args.fail_inconclusive,
        history=parse_history(args.history_window, "--history-window", alpha) if args.history else 0,
        strict=args.strict,
    )
    baseline, current, history = load_inputs(args.baseline, args.current, args.history, args.sessions)
    result = run_gate(baseline, current, bounds, history)
    print(result.format())
    if args.output:
        Path(args.output).write_text(result.format() + "\n")
    for e in result.errors:
        print(f"llmbench gate: error: {e}", file=sys.stderr)
    return result.exit_code


def _ops(args: argparse.Namespace) -> int:
    import json
    import logging

    from .worker.ops import BUILDERS, build_ahead, default_ahead

    device = args.device or ("cuda" if _has_cuda() else "cpu")
    names = args.ops.split(",") if args.ops else default_ahead(device, args.nvme)
    unknown = sorted(set(names) - set(BUILDERS))
    if unknown:
        raise ReportError(f"--ops {','.join(unknown)}: unknown op; choose from {', '.join(BUILDERS)}")
    logging.basicConfig(level=logging.INFO, format="llmbench ops: %(message)s", stream=sys.stderr)
    failed = 0
    built = build_ahead(names, device, logging.getLogger("llmbench"))
    if args.json:  # for a session that started this build beside its configurations
        Path(args.json).write_text(json.dumps(built, indent=1))
    for name, got in built.items():
        if "error" in got:
            failed += 1
            print(f"{name}: not built: {got['error']}")
        else:
            how = "compiled" if got["compiled"] else "already built"
            print(f"{name}: {how} in {got['sec']:.1f} s ({got['dir']})")
    return 1 if failed else 0


def _plan(args: argparse.Namespace) -> int:
    import time

    from .plan.command import CannotPlan, format_table, plan, plot, request

    started = time.perf_counter()
    req = request(args)  # every refusal that needs no torch, before torch is imported
    print(f"llmbench plan: tracing {req.model} on this CPU ...", file=sys.stderr)
    try:
        rows = plan(req)
    except CannotPlan as exc:
        print(f"llmbench plan: error: {exc}", file=sys.stderr)
        return 1
    print(format_table(req, rows))
    if req.plot:
        plot(rows, req.capacity, f"{req.model} on {req.gpus} x {req.gpu_name}", req.plot)
        print(f"wrote {req.plot}")
    print(f"llmbench plan: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _sessions(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write a whole number of sessions, 1 or more (e.g. --sessions 3)"
        )
    return value


def _noise_factor(text: str) -> float:
    # gone, not silently ignored: a CI script that relied on it learns what replaced it
    raise argparse.ArgumentTypeError(
        f"{text!r}: the noise allowance gave way to a significance test; drop --noise-factor "
        "(--alpha sets the false-alarm rate, default 0.01)"
    )


_NOT_DEFAULT = (
    ", ".join(name for name in (*STRATEGIES, *offload_variants()) if name not in DEFAULT_STRATEGIES)
    + "; zero3_nvme needs --llmbench-nvme-path"
)
"""What `pytest benchmarks/` leaves out of its strategies (config/spec.py's DEFAULT_STRATEGIES)."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="llmbench",
        formatter_class=_DESCRIBED,
        description=(
            "The benchmarks run under pytest, as tests, and each configuration writes a result.json\n"
            "under results/:\n"
            "  pytest benchmarks/                      every default strategy at world sizes 1, 2, 4, ...\n"
            f"                                          (all but {_NOT_DEFAULT})\n"
            "  torchrun --nproc_per_node=8 -m pytest benchmarks/ -k zero2     every rank runs pytest\n"
            "    (-k zero2 selects zero2_offload too: -k 'zero2 and not offload', or\n"
            "    --llmbench-strategies=zero2, runs it alone)\n"
            "Their options (strategies, model, world sizes, --llmbench-report, ...) are in\n"
            "`pytest --help`, section llmbench.\n"
            "\n"
            "This command reads those results: a report, a comparison of machines and prices, and a CI\n"
            "regression gate; `llmbench plan` predicts each strategy's peak GPU memory before anything\n"
            "runs, and `llmbench scale` its speed at more GPUs from a session's runs."
        ),
        epilog=(
            "Each command has its own --help. How to run the benchmarks, every option and how to read the\n"
            "report: the project's README, installed with llmbench: `llmbench readme` prints it,\n"
            '`llmbench readme "Validation checks"` one section of it.'
        ),
    )
    parser.add_argument("--version", action="version", version=f"llmbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_report(sub)
    _add_compare(sub)
    _add_gate(sub)
    _add_ops(sub)
    _add_plan(sub)
    _add_scale(sub)
    _add_readme(sub)
    return parser


_DESCRIBED = argparse.RawDescriptionHelpFormatter
"""Subcommand descriptions are laid out by hand: keep their line breaks."""


def _add_report(sub: Any) -> None:
    rep = sub.add_parser(
        "report",
        help="write metrics.csv, BENCHMARK_REPORT.md and plots for a results folder",
        formatter_class=_DESCRIBED,
        description=(
            "Read every result.json under RESULTS_DIR and write RESULTS_DIR/summary/:\n"
            "  metrics.csv          one row per run: result.json's first thirteen fields,\n"
            "                       scaling_efficiency_pct, then the rest\n"
            "  BENCHMARK_REPORT.md  the recommendation (fastest that fits, most memory-frugal and\n"
            "                       its cost), the patterns the runs show (fast but memory-hungry,\n"
            "                       poor scaling, ...), scaling (and its baseline), MFU,\n"
            "                       failed checks, OOM and error runs\n"
            "  plots/*.png          tokens/s, step time, scaling efficiency, GB/s vs GPUs; peak\n"
            "                       memory and MFU per strategy\n"
            "Unreadable result files are named on stderr and left out; the rest are still used.\n"
            "Each pytest session writes into a folder of its own, results/<UTC start>-<session id>/\n"
            "(results/latest links to the newest). Given results/ itself, a configuration run by\n"
            "several sessions is read from the newest session only (the others are named in a\n"
            "warning), never averaged as repeats; compare sessions with\n"
            "llmbench compare results/A results/B."
        ),
        epilog="examples: llmbench report results/latest   (the last session)\n"
        "          llmbench report results/          (every session, the newest run of each configuration)",
    )
    rep.add_argument(
        "results_dir", metavar="RESULTS_DIR", help="folder the benchmarks wrote (or one result.json)"
    )
    rep.add_argument("--out", metavar="DIR", help="write the summary here instead of RESULTS_DIR/summary")
    rep.add_argument("--no-plots", action="store_true", help="skip the plots (no matplotlib needed)")
    rep.add_argument("-q", "--quiet", action="store_true", help="do not print the summary table")
    rep.set_defaults(func=_report)


def _add_compare(sub: Any) -> None:
    cmp = sub.add_parser(
        "compare",
        help="compare the same configurations across machines or runs, with cost per 1M tokens",
        formatter_class=_DESCRIBED,
        description=(
            "Each INPUT is one machine or run: a results folder, a result.json, a pytest-benchmark\n"
            "saved run (.json) or a pytest-benchmark storage folder (its newest run). Per configuration:\n"
            "tokens/s, step time, peak memory, speed-up over the first input that ran it, and with\n"
            "--cost the $ per 1M tokens and per 1K samples (price x world size / 3600 / rate)."
        ),
        epilog="example: llmbench compare results-h100/ results-h200/ --cost 3.00 5.50 --markdown cmp.md",
    )
    cmp.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="results folders or files, one per machine/run"
    )
    cmp.add_argument(
        "--cost",
        nargs="+",
        metavar="PRICE",
        help="$ per GPU-hour, one per INPUT in the same order (e.g. --cost 3.00 5.50)",
    )
    cmp.add_argument("--markdown", metavar="FILE", help="also write the comparison as markdown to FILE")
    cmp.add_argument(
        "--sessions",
        type=_sessions,
        default=1,
        metavar="N",
        help="read each configuration's newest N sessions from a results folder INPUT (1)",
    )
    cmp.set_defaults(func=_compare)


def _add_gate(sub: Any) -> None:
    gate = sub.add_parser(
        "gate",
        help="fail (exit 1) when the current run is significantly slower or hungrier than the baseline",
        formatter_class=_DESCRIBED,
        description=(
            "Compare CURRENT with BASELINE per configuration: tokens/s, step time and peak memory, each\n"
            "with its change, 95% interval and p-value. Speed takes the session as the unit: a t-test on\n"
            "each session's mean step time against the spread between sessions, measured where a side has\n"
            "2+ sessions (--sessions) or --history has earlier ones, else the spread measured for the\n"
            "strategy on that hardware (named in the output). One peak a side is compared exactly, or with\n"
            "the bound only. REGRESSION (exit 1): p < alpha and the change past the bound. Inconclusive:\n"
            "reported with the sessions a side that would settle it; exit 1 only with --fail-inconclusive.\n"
            "Each configuration also gets the sessions a side that catch a slowdown of twice the bound.\n"
            "A configuration that finished in the baseline and fails now is a regression; a baseline that\n"
            "is the current run itself is refused.\n"
            "--history DIR: the last K runs of each configuration in DIR (pytest-benchmark storage or a\n"
            "results folder) are searched for a change of level (permutation test on the best split),\n"
            "which catches a slow drift that passes every single comparison.\n"
            "BASELINE and CURRENT: a results folder, a result.json, a pytest-benchmark .json, or a\n"
            "pytest-benchmark storage folder such as .benchmarks/ (its newest saved run).\n"
            "Bounds are fractions or percentages: 0.05 or 5%.\n"
            "Exit: 0 passed, 1 regression, 2 could not compare (bad input, the baseline is the current run,\n"
            "another device or GPU model with --strict)."
        ),
        epilog="example: llmbench gate --baseline .benchmarks --current results/latest --history .benchmarks",
    )
    gate.add_argument("--baseline", metavar="B", help="the reference run (or leave out with --history)")
    gate.add_argument("--current", required=True, metavar="C", help="the run under test")
    gate.add_argument(
        "--max-tokens-drop", default="5%", metavar="PCT", help="largest allowed fall in tokens/s (5%%)"
    )
    gate.add_argument(
        "--max-step-time-rise", default="5%", metavar="PCT", help="largest allowed rise in step time (5%%)"
    )
    gate.add_argument(
        "--max-memory-rise",
        default="5%",
        metavar="PCT",
        help="largest allowed rise in peak memory per rank (5%%)",
    )
    gate.add_argument(
        "--alpha", default="0.01", metavar="P", help="significance level of a regression (0.01)"
    )
    gate.add_argument(
        "--fail-inconclusive",
        action="store_true",
        help="an interval that reaches past a bound without a verdict fails the gate too",
    )
    gate.add_argument(
        "--history",
        metavar="DIR",
        help="also search the last K runs of each configuration in DIR for a change of level",
    )
    gate.add_argument(
        "--history-window",
        default="20",
        metavar="K",
        help="earlier runs --history looks at (20; at alpha 0.01, 9 or more)",
    )
    gate.add_argument(
        "--sessions",
        type=_sessions,
        default=1,
        metavar="N",
        help="read each configuration's newest N sessions from a results folder on each side (1)",
    )
    gate.add_argument("--noise-factor", type=_noise_factor, help=argparse.SUPPRESS)
    gate.add_argument(
        "--strict", action="store_true", help="a baseline from another GPU model is an error, not a warning"
    )
    gate.add_argument("--output", metavar="FILE", help="also write the gate's report to FILE (CI artifact)")
    gate.set_defaults(func=_gate)


def _add_ops(sub: Any) -> None:
    ops = sub.add_parser(
        "ops",
        help="build DeepSpeed's just-in-time ops now, so no benchmark session waits for a compiler",
        formatter_class=_DESCRIBED,
        description=(
            "DeepSpeed compiles some ops the first time a process loads them: CPU Adam (offload),\n"
            "async I/O (zero3_nvme), and on a CPU its shared-memory all-reduce. A session that meets\n"
            "an unbuilt op waits for it (on a fresh 1x H100 host, 2026-11-25: CPU Adam 48 to 60 s,\n"
            "CPU Adam and async I/O 94 s together).\n"
            "This builds them into the directory sessions load them from (TORCH_EXTENSIONS_DIR, or\n"
            "one per torch and DeepSpeed installation), once per machine; built ops are found, not\n"
            "rebuilt. Prints each op's time. Exit 1 when an op cannot be built here."
        ),
        epilog="example: llmbench ops --nvme    (on a GPU host that will run zero3_nvme)",
    )
    ops.add_argument(
        "--device", choices=("cpu", "cuda"), help="build for this device (default: cuda if one is visible)"
    )
    ops.add_argument("--nvme", action="store_true", help="also async I/O, for zero3_nvme")
    ops.add_argument("--json", metavar="FILE", help="also write each op's time and whether it was compiled")
    ops.add_argument(
        "--ops", metavar="NAMES", help="exactly these, comma-separated: shm_comm, cpu_adam, async_io"
    )
    ops.set_defaults(func=_ops)


def _add_plan(sub: Any) -> None:
    from .plan.command import add_arguments

    cmd = sub.add_parser(
        "plan",
        help="predict each strategy's peak GPU memory for a model, before anything runs",
        formatter_class=_DESCRIBED,
        description=(
            "Predicts, on this machine's CPU and in seconds, each strategy's peak GPU memory per rank for\n"
            "MODEL on the given GPUs: model states, activations, temporaries and the strategy's buffers,\n"
            "allocated and reserved; whether it fits; and the largest batch per GPU that fits. The step\n"
            "is traced without allocating (FakeTensorMode), from the same model code a run trains."
        ),
        epilog="example: llmbench plan llama-7b --gpu H100 --gpus 8 --seq-len 4096 --plot plan.png",
    )
    add_arguments(cmd)  # declared and checked in one place, plan/command.py
    cmd.set_defaults(func=_plan)


def _scale(args: argparse.Namespace) -> int:
    from .plan.scale_command import run

    return run(args)


def _add_scale(sub: Any) -> None:
    from .plan.scale_command import add_arguments

    cmd = sub.add_parser(
        "scale",
        help="predict tokens/s, scaling and peak memory at 8 to 1,024 GPUs from a session's runs",
        formatter_class=_DESCRIBED,
        description=(
            "For every configuration RESULTS_DIR holds, predicts step time, tokens/s, scaling efficiency,\n"
            "peak memory per GPU and the share of the step that is exposed communication at larger world\n"
            "sizes: from the measured compute and optimizer time, the strategy's collectives timed over the\n"
            "link the session's probe measured (and the network you name beyond a node), and the miss of\n"
            "the model at the largest world size measured. Measured and assumed figures are marked."
        ),
        epilog="example: llmbench scale results/latest --network 400G --world-sizes 8,64,512 --plot s.png",
    )
    add_arguments(cmd)
    cmd.set_defaults(func=_scale)


def _readme(args: argparse.Namespace) -> int:
    from . import readme

    try:
        print(readme.find(args.section) if args.section else readme.text(), end="")
    except readme.ReadmeError as exc:
        print(f"llmbench readme: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    return 0


def _add_readme(sub: Any) -> None:
    cmd = sub.add_parser(
        "readme",
        help="print the README installed with llmbench, or one section of it or of the docs pages",
        description="Print the README (how to run the benchmarks and read the report) as installed "
        "with this llmbench, or the first section of it or of the docs pages (in a checkout; the options "
        "reference everywhere) whose title contains SECTION.",
        epilog='example: llmbench readme "What a run produces"',
    )
    cmd.add_argument("section", nargs="?", metavar="SECTION", help="a word or words of a section's title")
    cmd.set_defaults(func=_readme)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return int(args.func(args))
    except (ReportError, SpecError) as exc:
        print(f"llmbench {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:
        # the reader went away (`llmbench report results/ | head`): no error message on a closed pipe;
        # stdout goes to devnull so the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # an output path that cannot be written
        print(f"llmbench {args.command}: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
