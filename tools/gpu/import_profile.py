"""Where a fresh rank's imports go: `python -X importtime` of what a rank imports before its first
configuration (worker/main.py, then worker/models.preload for a model and strategy), summed by
top-level package, slowest first. For the first configuration's `imports` phase
(tools/time_to_answer.py), which on a fresh 1x H100 host took 9.6 s for llama-1b ddp.

    python3 tools/gpu/import_profile.py [--model llama-1b] [--strategy ddp] [--top 15]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import defaultdict

LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")

RANK = """
import llmbench_pytest.worker.main
from llmbench_pytest.config.presets import resolve_model
from llmbench_pytest.config.spec import RunSpec, parse_strategy
from llmbench_pytest.worker.models import preload
info, offload = parse_strategy({strategy!r})
spec = RunSpec(strategy=info.name, offload=offload, model={model!r}, seq_len=128, per_device_batch=1, steps=1,
              warmup=0, dtype="bf16")
preload(spec, resolve_model(spec.model))
"""


def by_package(stderr: str) -> dict[str, float]:
    """Seconds of import work by top-level package (each module's own time, summed)."""
    own: dict[str, float] = defaultdict(float)
    for m in LINE.finditer(stderr):
        own[m.group(4).split(".")[0]] += int(m.group(1)) / 1e6
    return own


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama-1b")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    code = RANK.format(strategy=args.strategy, model=args.model)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return proc.returncode
    own = by_package(proc.stderr)
    total = sum(own.values())
    print(f"{args.model} {args.strategy}: interpreter and imports {wall:.2f} s wall, "
          f"{total:.2f} s of import work")  # fmt: skip
    for name, sec in sorted(own.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {name:<28}{sec:7.2f} s  {sec / total:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
