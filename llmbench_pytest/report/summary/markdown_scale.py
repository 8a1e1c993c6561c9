"""BENCHMARK_REPORT.md's *Beyond this node*: where a session ran two or more world sizes, what each
configuration would do on more GPUs (plan/scale.py), over the link the session's probe measured
and, beyond one node, an assumed network; the same figures go to summary/scale.json for CI.
`llmbench scale RESULTS_DIR` gives any world sizes and a network of the user's choosing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ...plan.network import Fabric, network, widest_sweep
from ...plan.scale import BAND, predict_config, to_json
from .. import fmt
from ..scaling import group
from .md_table import md_table

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from ..collect import Run

SIZES = (4, 8, 16, 64, 256)
GPUS_PER_NODE = 8
ASSUMED_NETWORK = "400G"
FILE = "scale.json"


def render(runs: Sequence[Run], out_dir: Path | None = None) -> list[str]:
    """The section, and scale.json in `out_dir`; nothing where the session ran one world size or
    measured no link (CPU sessions included: their gloo 'link' says nothing of GPUs)."""
    data = [r.data for r in runs if r.ok]
    sweep = widest_sweep(data, device="cuda")
    if sweep is None or len({int(d.get("world_size") or 1) for d in data}) < 2:
        return []
    gbytes, latency, name = network(ASSUMED_NETWORK, None, None)
    fabric = Fabric(sweep, GPUS_PER_NODE, gbytes, latency, name)
    scales = []
    for config, members in group([r for r in runs if r.data.get("device") == "cuda"]).items():
        try:
            scales.append(predict_config(config, members, SIZES, fabric))
        except (ValueError, KeyError):
            continue  # a strategy without a schedule: left out rather than guessed
    if not scales:
        return []
    if out_dir is not None:
        (out_dir / FILE).write_text(json.dumps(to_json(scales, fabric), indent=1))
    rows = []
    for s in scales:
        by_n = {p.world_size: p for p in s.predictions}
        cells = [
            f"{fmt.tokens(by_n[n].tokens_per_sec)} ({by_n[n].efficiency:.0%})" if n in by_n else fmt.NA
            for n in SIZES
        ]
        rows.append([s.name, *cells, "; ".join(s.flags) or "-"])
    return [
        "",
        "## Beyond this node",
        "",
        f"Predicted tokens/s (scaling efficiency) at more GPUs, from this session's runs (plan/scale.py): "
        f"the measured compute and optimizer time, each strategy's collectives timed over the link the "
        f"probe measured at {fabric.measured_world_size} GPUs (assumed to hold for the {GPUS_PER_NODE} GPUs "
        f"of a node), beyond {GPUS_PER_NODE} GPUs an assumed {ASSUMED_NETWORK} NIC per GPU between nodes, "
        f"and the model's miss at the largest measured world size carried; {fabric.overlap_text()}. "
        f"`llmbench scale RESULTS_DIR --network ...` gives other sizes and networks; figures in `{FILE}`.",
        "",
        md_table(["configuration", *(f"{n} GPUs" for n in SIZES), "flags"], rows),
        "",
        f"Error band: {BAND}.",
    ]
