"""Where a session's processes spent their time, from a py-spy recording: each process's seconds,
and for one process the main thread's seconds under each named function (the deepest one named
in a stack wins) with the costliest call paths below it.

    py-spy record --subprocesses --idle --nonblocking -r 50 -f raw -o spy.txt -- \\
        python3 -m pytest benchmarks/test_pretrain.py -p no:cacheprovider -q
    python3 tools/gpu/spy_phases.py spy.txt                      # the processes
    python3 tools/gpu/spy_phases.py spy.txt --pid 675 --rate 50  # one rank's phases

py-spy is not a dependency: carry its wheel in .whl/ (`pip download py-spy`) and setup.sh installs
it with the others. With --idle every sample of every thread counts, waiting included, so a
phase's seconds are wall seconds of the main thread (at --rate samples a second).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import re
import sys
from pathlib import Path

PHASES = (
    "preload,_predict_peak,build_model,prepare_ops,setup,timed_loop,after_window,_teardown,release,"
    "_check_leftover,settle,flush_device_collectives,_next_job,get_cpu_info,source_to_code"
)
"""The rank's phases (worker/run.py, loop.py, main.py), DeepSpeed's py-cpuinfo calls, and Python
compiling a module's source (no bytecode cache)."""

_PROCESS = re.compile(r'process (\d+):"((?:[^"]|\n)*)"')


def samples(path: Path):
    """(pid, command, frames, count) for each stack of a raw (collapsed) py-spy file."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        text = fh.read()
    # a stack is one line, but a process's command line may hold newlines: split on the count
    for record in re.finditer(r"(.*?) (\d+)\n", text, re.S):
        stack, count = record.group(1), int(record.group(2))
        processes = _PROCESS.findall(stack)
        pid, command = processes[-1] if processes else ("?", "?")
        rest = stack.split('";')[-1] if processes else stack
        yield pid, command.replace("\n", " "), rest.split(";"), count


def _name(frame: str) -> str:
    return frame.split(" (", maxsplit=1)[0]


def _where(frame: str) -> str:
    inside = frame[frame.find("(") + 1 : -1] if "(" in frame else ""
    return f"{_name(frame)}@{inside.rsplit('/', 1)[-1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path, help="py-spy's raw output (-f raw), gzipped or not")
    parser.add_argument("--pid", help="the process whose main thread to break down")
    parser.add_argument("--rate", type=float, default=50.0, help="py-spy's -r (default: 50)")
    parser.add_argument("--phases", default=PHASES, help="comma-separated function names")
    parser.add_argument("--depth", type=int, default=3, help="frames shown below a phase")
    parser.add_argument("--paths", type=int, default=6, help="call paths shown per phase")
    args = parser.parse_args(argv)
    phases = args.phases.split(",")
    per_pid: collections.Counter[str] = collections.Counter()
    commands: dict[str, str] = {}
    by_phase: collections.Counter[str | None] = collections.Counter()
    paths: dict[str | None, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for pid, command, frames, count in samples(args.raw):
        per_pid[pid] += count
        commands[pid] = command
        main_thread = frames[0].startswith(("_run_module_as_main", "<module>"))
        if pid != args.pid or not main_thread:
            continue
        hit, at = None, -1
        for i, frame in enumerate(frames):
            if _name(frame).rsplit(".", 1)[-1] in phases:
                hit, at = _name(frame).rsplit(".", 1)[-1], i
        by_phase[hit] += count
        below = frames[at + 1 : at + 1 + args.depth] if at >= 0 else frames[-args.depth :]
        paths[hit][" ; ".join(_where(f) for f in below)] += count
    print(f"{args.raw}: {sum(per_pid.values()) / args.rate:.1f} s of samples, every thread")
    for pid, count in per_pid.most_common(15):
        print(f"  {count / args.rate:7.1f} s  pid {pid}  {commands[pid][-110:]}")
    if args.pid is None:
        return 0
    print(f"\npid {args.pid}, main thread, by the deepest phase named in each stack:")
    for phase, count in by_phase.most_common():
        print(f"  {count / args.rate:7.1f} s  {phase or '(none of them)'}")
        for path, n in paths[phase].most_common(args.paths):
            print(f"      {n / args.rate:6.1f}  {path[:220]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
