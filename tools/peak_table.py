"""Predicted against measured peak GPU memory for every saved GPU run.

    python3 tools/peak_table.py                       # every result.json under docs/results
    python3 tools/peak_table.py RESULTS_DIR --out docs/results/<dir>/table.md

Each run's configuration is rebuilt from its result.json and predicted as `llmbench plan` would
(a traced step on this CPU plus the strategy's states and buffers); the table lists measured and
predicted peak allocated, the gap, and reserved. Runs beyond +-10% are marked **. Runs measured
with a defect of the measuring tool (DeepSpeed's linear left by an earlier ZeRO-3 on the same warm
ranks, before b49aad2), found from their result files (plan/validate.defects), are counted and
listed apart, with their prediction as they ran beside. Writes only the file named by --out
(stdout otherwise).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

from llmbench_pytest.plan.predict import predict_spec
from llmbench_pytest.plan.validate import markdown, rows, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dirs", nargs="*", type=Path, default=[Path("docs/results")])
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        parser.error(f"no such directory: {missing[0]}")
    started = time.perf_counter()
    paths = [p for d in args.dirs for p in d.rglob("result.json")]
    print(f"predicting {len(paths)} result files ...", file=sys.stderr)
    table = rows(paths, predict_spec, functools.partial(predict_spec, deepspeed_linear=True))
    root = Path.cwd()
    text = markdown(table, root)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    s = summary(table)
    print(
        f"{s['clean_within']} of {s['clean']} measured without the defect within +-10%; "
        f"{s['defect']} measured with it ({s['defect_within']} within, {s['defect_within_as_run']} as run); "
        f"{s['undetermined']} undetermined; {s['not_predicted']} not predicted; {s['runs']} GPU runs "
        f"({time.perf_counter() - started:.0f} s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
