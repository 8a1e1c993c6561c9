"""BENCHMARK_REPORT.md's *Beyond this node*: where a session ran two or more world sizes on GPUs, what
each configuration would do on more GPUs (plan/scale.py), each figure with its 90% interval, over
the link the session's probe measured and, beyond one node, an assumed network; the same figures go
to summary/scale.json for CI. A CPU session gets no section (its gloo ranks say nothing of a GPU).
`llmbench scale RESULTS_DIR` gives any world sizes and a network of the user's choosing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ...plan.network import Fabric, network, nic_efficiency, widest_sweep
from ...plan.scale import BAND, predict_config, to_json
from .. import fmt
from ..scaling import group
from .md_table import md_table

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from ...plan.scale import Prediction
    from ..collect import Run

SIZES = (4, 8, 16, 64, 256)
GPUS_PER_NODE = 8
ASSUMED_NETWORK = "400G"
FILE = "scale.json"


def _cell(p: Prediction | None) -> str:
    """'431,902 (93%), 421,241-442,739' for a prediction; the measurement alone for a measured size."""
    if p is None:
        return fmt.NA
    text = f"{fmt.tokens(p.tokens_per_sec)} ({p.efficiency:.0%})"
    low, high = p.tokens_interval
    if p.measured or low is None or high is None:
        return f"{text}, measured"
    return f"{text}, {fmt.tokens(low)}-{fmt.tokens(high)}"


def render(runs: Sequence[Run], out_dir: Path | None = None) -> list[str]:
    """The section, and scale.json in `out_dir`; nothing where the session ran one world size or
    measured no link (CPU sessions included: their gloo 'link' says nothing of GPUs)."""
    data = [r.data for r in runs if r.ok]
    sweep = widest_sweep(data, device="cuda")
    if sweep is None or len({int(d.get("world_size") or 1) for d in data}) < 2:
        return []
    gbytes, latency, name = network(ASSUMED_NETWORK, None, None)
    efficiency = nic_efficiency(ASSUMED_NETWORK, None)
    fabric = Fabric(sweep, GPUS_PER_NODE, gbytes, latency, name, nic_efficiency=efficiency)
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
        rows.append([s.name, *(_cell(by_n.get(n)) for n in SIZES), "; ".join(s.flags) or "-"])
    return [
        "",
        "## Beyond this node",
        "",
        f"Predicted tokens/s (scaling efficiency) at more GPUs, from this session's runs (plan/scale.py): "
        f"the measured compute and optimizer time, each strategy's collectives timed over the link the "
        f"probe measured at {fabric.measured_world_size} GPUs (assumed to hold for the {GPUS_PER_NODE} GPUs "
        f"of a node), beyond {GPUS_PER_NODE} GPUs an assumed {ASSUMED_NETWORK} NIC per GPU between nodes, "
        f"and the model's miss at the largest measured world size carried; {fabric.overlap_text()}. "
        "Each cell: tokens/s (scaling efficiency), then its 90% interval, from the inputs' spread, the "
        "strategy's spread from host to host, the model's validated error at that distance and, beyond "
        "the node, the assumptions' published ranges. "
        f"`llmbench scale RESULTS_DIR --network ...` gives other sizes and networks; figures in `{FILE}`.",
        "",
        md_table(["configuration", *(f"{n} GPUs" for n in SIZES), "flags"], rows),
        "",
        f"What the intervals are known to: {BAND}.",
    ]
