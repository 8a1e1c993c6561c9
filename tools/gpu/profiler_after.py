"""Whether a step under torch.profiler leaves later steps slower (CUPTI left subscribed, say).

    python3 tools/gpu/profiler_after.py --rounds 3 --json out.json

Each round starts two new processes that train the same host-bound model (many small layers, so a
step is mostly kernel launches, where any per-launch overhead shows): both time a block of steps,
then one runs a single step under torch.profiler (device activity only, as the counted steps after
an offload window do; `--host-ops` adds the host's operators) and the other does not, and both time
a second block. The figure is each process's second block against its first; the two should match
if profiling leaves nothing behind. `--teardown 1` sets TEARDOWN_CUPTI=1 (Kineto then finalizes
CUPTI when the profiler stops, as llmbench's ranks ask: worker/profiling.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _child import figures_of

CHILD = r"""
import json, sys, time
import torch
from torch.profiler import ProfilerActivity, profile
profiled, host_ops, steps = sys.argv[1] == "1", sys.argv[2] == "1", int(sys.argv[3])
torch.manual_seed(0)
layers = [torch.nn.Linear(256, 256) for _ in range(120)]
model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.GELU())]).cuda()
opt = torch.optim.AdamW(model.parameters(), fused=True)
x = torch.randn(32, 256, device="cuda")
def step():
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
def block():
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) / steps
for _ in range(20):
    step()
first = block()
if profiled:
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if host_ops else [])
    with profile(activities=activities):
        step()
        torch.cuda.synchronize()
second = block()
print(json.dumps({"profiled": profiled, "first_ms": first * 1e3, "second_ms": second * 1e3,
                  "second_over_first": second / first}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--host-ops", action="store_true")
    parser.add_argument(
        "--teardown", choices=["unset", "0", "1"], default="unset", help="TEARDOWN_CUPTI for the processes"
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    runs = []
    for _ in range(args.rounds):
        for profiled in ("0", "1"):
            command = [sys.executable, "-c", CHILD, profiled, "1" if args.host_ops else "0", str(args.steps)]
            env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"}
            if args.teardown != "unset":
                env["TEARDOWN_CUPTI"] = args.teardown
            run = figures_of(command, "profiled" if profiled == "1" else "not profiled", env=env)
            if run is None:
                continue
            runs.append(run)
            print(json.dumps(run))
    for profiled in (False, True):
        ratios = [r["second_over_first"] for r in runs if r["profiled"] == profiled]
        if ratios:
            label = "profiled between" if profiled else "not profiled"
            print(f"{label}: second block / first {', '.join(f'{x:.4f}' for x in ratios)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(runs, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
