"""`llmbench scale RESULTS_DIR`: what each configuration a session measured would do at 8 to 1,024
GPUs (plan/scale.py), each prediction with its 90% interval, over the link the session's probe
measured inside the node and a network the user names beyond it. Prints a table per configuration
and writes the figures as JSON.

Inputs that cannot serve are named, not used silently: a result file that cannot be read (as
`report` and `compare` name it); a CPU session, whose gloo ranks say nothing of a GPU (its
predictions are printed as code-path smoke: step seconds per rank count, no tokens/s or efficiency
of any GPU).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..report.scaling import group
from .network import Fabric, network, nic_efficiency, widest_sweep
from .scale import BAND, ConfigScale, Prediction, predict_config, to_json

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


DEFAULT_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
SMOKE = (
    "CPU smoke: these runs ran on CPU ranks over gloo; the figures below exercise the code path and are "
    "no GPU's (run the session on GPUs for a prediction)"
)


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("results_dir", metavar="RESULTS_DIR", help="a folder of result.json files (a session's)")
    cmd.add_argument(
        "--world-sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="GPU counts to predict, comma-separated (default: %(default)s)",
    )
    cmd.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        help="GPUs a node holds, 1 or more (default: the GPUs of the host the results came from, at least 8 "
        "when beyond-node sizes are asked for and the host had fewer)",
    )
    cmd.add_argument("--network", help="the NIC per GPU between nodes: 100G, 200G, 400G, 800G, or 2x400G")
    cmd.add_argument(
        "--network-gbps",
        type=float,
        help="GB/s (gigabytes a second) of bus bandwidth per GPU across nodes, as nccl-tests reports busbw, "
        "instead of --network; at most 200",
    )
    cmd.add_argument(
        "--network-latency-us",
        type=float,
        help="the network's latency a ring step, microseconds (default 14, NCCL's own figure)",
    )
    cmd.add_argument(
        "--json", metavar="PATH", help="write the predictions here (default RESULTS_DIR/scale.json)"
    )
    cmd.add_argument("--plot", metavar="PATH", help="draw tokens/s and efficiency against GPUs (PNG)")


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise ValueError(f"--world-sizes {text!r}: give whole numbers, e.g. 8,16,64") from None
    if not sizes or sizes[0] < 1:
        raise ValueError(f"--world-sizes {text!r}: every size must be 1 or more")
    return sizes


def gpus_per_node(given: int | None, host_gpus: int, sizes: Sequence[int]) -> int:
    """The node's GPUs: the user's, else the measured host's (at least 8 beyond it)."""
    if given is not None:
        if given < 1:
            raise ValueError(
                f"--gpus-per-node {given}: a node holds 1 or more GPUs; give the count of yours "
                "(e.g. --gpus-per-node 8), or leave it out for the measured host's"
            )
        return given
    return max(host_gpus, 8 if max(sizes) > host_gpus else host_gpus)


def fabric_for(runs: Sequence[dict[str, Any]], args: argparse.Namespace, sizes: Sequence[int]) -> Fabric:
    """The link the session's probe measured at its largest world size, and the named network."""
    sweep = widest_sweep(runs)
    if sweep is None:
        raise ValueError(
            "no link probe in these results: a session that runs 2 or more GPUs measures the link before "
            "its first configuration (LLMBENCH_LINK_PROBE=0 turns it off); run one at world size 2"
        )
    gbytes, latency, name = network(args.network, args.network_gbps, args.network_latency_us)
    host_gpus = max(int(r.get("world_size") or 1) for r in runs)
    per_node = gpus_per_node(args.gpus_per_node, host_gpus, sizes)
    if max(sizes) > per_node and gbytes is None:
        raise ValueError(
            f"{max(sizes)} GPUs span nodes of {per_node}: name the network between them (--network 400G, or "
            "--network-gbps and --network-latency-us), or ask for at most --world-sizes up to the node"
        )
    efficiency = nic_efficiency(args.network, args.network_gbps)
    return Fabric(sweep, per_node, gbytes, latency, name, nic_efficiency=efficiency)


def _header(s: ConfigScale) -> str:
    n0 = s.base.get("world_size")
    text = f"{s.name}: from {n0} GPU{'s' if n0 != 1 else ''}"
    text += f", anchored at the measured {s.anchor.get('world_size')}" if s.anchor else ""
    return text + f"; intervals of its class ({s.klass})"


def _band(low: float | None, high: float | None, fmt: str) -> str:
    return f"{format(low, fmt)}-{format(high, fmt)}" if low is not None and high is not None else "measured"


def _row(p: Prediction, smoke: bool) -> str:
    peak = f"{p.peak_gb:8.1f}" if p.peak_gb is not None else f"{'-':>8}"
    src = "measured" if p.measured else "predicted"
    if p.assumed:
        src += f" (assumed: {'; '.join(p.assumed)})"
    tokens = _band(*p.tokens_interval, ",.0f")
    eff = _band(*(e * 100 if e is not None else None for e in p.efficiency_interval), ".0f")
    if smoke:
        return f"  {p.world_size:>6} {p.step_sec:>8.4f}  {src}"
    return (
        f"  {p.world_size:>6} {p.tokens_per_sec:>12,.0f} {tokens:>23} {p.step_sec:>8.4f} "
        f"{p.efficiency:>5.0%} {eff:>9} {peak} {p.exposed_share:>8.1%}  {src}"
    )


def render(
    scales: Sequence[ConfigScale], fabric: Fabric, problems: Sequence[str] = (), smoke: bool = False
) -> str:
    peak = max(float(t.get("peak_busbw_gbps") or 0) for t in fabric.sweep.values() if isinstance(t, dict))
    between = fabric.network_name or "not asked for"
    unit = "ranks" if smoke else "GPUs"
    lines = [SMOKE] if smoke else []
    lines += [f"left out, unreadable: {p}" for p in problems]
    lines += [
        f"link inside a node: measured by the session's probe at {fabric.measured_world_size} {unit} (peak "
        f"busbw {peak:.0f} GB/s); {fabric.gpus_per_node} {unit} per node; between nodes: {between}"
        f"{'' if 'assumed' in between or between.endswith('(given)') else ' (assumed)'}",
        fabric.overlap_text(),
        f"what the intervals are known to: {BAND}",
    ]
    head = f"  {unit:>6} {'step s':>8}  source"
    if not smoke:
        head = (
            f"  {unit:>6} {'tokens/s':>12} {'90% interval':>23} {'step s':>8} {'eff':>5} {'eff 90%':>9} "
            f"{'peak GB':>8} {'exposed':>8}  source"
        )
    for s in scales:
        lines += [
            "",
            _header(s),
            *(f"  ! {f}" for f in s.flags),
            head,
            *(_row(p, smoke) for p in s.predictions),
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..report.collect import load_results

    try:
        sizes = _sizes(args.world_sizes)
        root = Path(args.results_dir)
        if not root.exists():
            raise ValueError(f"no such folder {root}: give the folder a session wrote (results/latest)")
        collection = load_results(root)
        loaded = collection.runs
        groups = group(loaded)
        if not groups:
            raise ValueError(f"no finished run under {root}: nothing to scale")
        fabric = fabric_for([r.data for r in loaded], args, sizes)
    except ValueError as exc:
        print(f"llmbench scale: error: {exc}", file=sys.stderr)
        return 2
    for problem in collection.problems:  # as report and compare name them
        print(f"llmbench scale: warning: {problem}", file=sys.stderr)
    smoke = all(r.is_cpu for r in loaded)
    scales = []
    for name, members in groups.items():
        try:
            scales.append(predict_config(name, members, sizes, fabric))
        except (ValueError, KeyError) as exc:
            print(f"llmbench scale: {name}: not predicted: {exc}", file=sys.stderr)
            continue
        n0 = int(scales[-1].base.get("world_size") or 1)
        if collection.problems and n0 > 1:
            scales[-1].flags.append(
                f"its smallest readable run is at {n0} GPUs: if its 1-GPU run is among the unreadable files "
                "named above, these predictions start from the wrong run; repair or rerun it"
            )
    print(render(scales, fabric, collection.problems, smoke))
    out = Path(args.json) if args.json else root / "scale.json"
    extra = {
        "unreadable_results": list(collection.problems),
        "cpu_smoke": SMOKE if smoke else None,
        "world_size_unit": "CPU ranks" if smoke else "GPUs",
    }
    out.write_text(json.dumps(to_json(scales, fabric, extra), indent=1))
    print(f"\nfigures: {out}")
    if args.plot:
        from .scale_plot import draw

        print(f"plot: {draw(scales, Path(args.plot), smoke)}")
    return 0
