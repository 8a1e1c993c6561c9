"""Every run's validation checks in one line each: what passed, failed or gave no verdict.

    python3 tools/gpu/checks.py /tmp/llmbench/NAME        # after tools/gpu/run.sh NAME ...

Standard library only (runs on the GPU host without the package on the path). A check's
`measured` is shown beside its verdict: model_states' gap to the prediction, mean_interval's
half-width, scaling's efficiency, peak_memory's GB. Failed checks' messages follow their line.
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

SHORT = {True: "pass", False: "FAIL", None: "n/a"}


def main(root: str) -> int:
    failed = 0
    found = glob.glob(f"{root}/**/*_results/result.json", recursive=True)
    # results/latest links to a session folder that the walk also reaches by its own name
    for path in sorted(p for p in found if "latest" not in Path(p).relative_to(root).parts):
        d = json.load(open(path))
        cells = []
        for c in d.get("checks") or []:
            m = c.get("measured")
            shown = f"({m:.3g})" if isinstance(m, float) else ""
            cells.append(f"{c['name']}={SHORT.get(c.get('passed'), '?')}{shown}")
        print(f"{d['strategy']:>14} ws{d['world_size']} {d['status']:>5} " + " ".join(cells))
        for c in d.get("checks") or []:
            if c.get("passed") is False:
                failed += 1
                print(f"{'':>16}{c['name']}: {c['message']}")
            elif c.get("passed") is None and d.get("device") == "cuda":
                print(f"{'':>16}{c['name']} (no verdict): {c['message'][:160]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
