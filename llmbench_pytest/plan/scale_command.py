"""`llmbench scale RESULTS_DIR`: what each configuration a session measured would do at 8 to 1,024
GPUs (plan/scale.py), over the link the session's probe measured inside the node and a network
the user names beyond it. Prints a table per configuration and writes the figures as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..report.scaling import group
from .network import Fabric, network, widest_sweep
from .scale import BAND, ConfigScale, Prediction, predict_config, to_json

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


DEFAULT_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


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
        help="GPUs a node holds (default: the GPUs of the host the results came from, at least 8 when "
        "beyond-node sizes are asked for and the host had fewer)",
    )
    cmd.add_argument("--network", help="the NIC per GPU between nodes: 100G, 200G, 400G, 800G, or 2x400G")
    cmd.add_argument("--network-gbps", type=float, help="bus GB/s per GPU across nodes, instead of --network")
    cmd.add_argument("--network-latency-us", type=float, help="latency per network hop, us (default 5)")
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
    per_node = args.gpus_per_node or max(host_gpus, 8 if max(sizes) > host_gpus else host_gpus)
    if per_node < 1:
        raise ValueError(f"--gpus-per-node must be 1 or more; got {per_node}")
    if max(sizes) > per_node and gbytes is None:
        raise ValueError(
            f"{max(sizes)} GPUs span nodes of {per_node}: name the network between them (--network 400G, or "
            "--network-gbps and --network-latency-us), or ask for at most --world-sizes up to the node"
        )
    return Fabric(sweep, per_node, gbytes, latency, name)


def _header(s: ConfigScale) -> str:
    n0 = s.base.get("world_size")
    text = f"{s.name}: from {n0} GPU{'s' if n0 != 1 else ''}"
    return text + (f", anchored at the measured {s.anchor.get('world_size')}" if s.anchor else "")


def _row(p: Prediction) -> str:
    peak = f"{p.peak_gb:8.1f}" if p.peak_gb is not None else f"{'-':>8}"
    src = "measured" if p.measured else "predicted"
    if p.assumed:
        src += f" (assumed: {'; '.join(p.assumed)})"
    return (
        f"  {p.world_size:>6} {p.tokens_per_sec:>12,.0f} {p.step_sec:>8.4f} {p.efficiency:>5.0%} "
        f"{peak} {p.exposed_share:>8.1%}  {src}"
    )


def render(scales: Sequence[ConfigScale], fabric: Fabric) -> str:
    peak = max(float(t.get("peak_busbw_gbps") or 0) for t in fabric.sweep.values() if isinstance(t, dict))
    between = fabric.network_name or "not asked for"
    lines = [
        f"link inside a node: measured by the session's probe at {fabric.measured_world_size} GPUs (peak "
        f"busbw {peak:.0f} GB/s); {fabric.gpus_per_node} GPUs per node; between nodes: {between}"
        f"{'' if 'assumed' in between else ' (assumed)'}",
        fabric.overlap_text(),
        f"error band: {BAND}",
    ]
    head = f"  {'GPUs':>6} {'tokens/s':>12} {'step s':>8} {'eff':>5} {'peak GB':>8} {'exposed':>8}  source"
    for s in scales:
        lines += ["", _header(s), *(f"  ! {f}" for f in s.flags), head, *(_row(p) for p in s.predictions)]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..report.collect import load_results

    try:
        sizes = _sizes(args.world_sizes)
        root = Path(args.results_dir)
        if not root.exists():
            raise ValueError(f"no such folder {root}: give the folder a session wrote (results/latest)")
        loaded = load_results(root).runs
        groups = group(loaded)
        if not groups:
            raise ValueError(f"no finished run under {root}: nothing to scale")
        fabric = fabric_for([r.data for r in loaded], args, sizes)
    except ValueError as exc:
        print(f"llmbench scale: error: {exc}", file=sys.stderr)
        return 2
    scales = []
    for name, members in groups.items():
        try:
            scales.append(predict_config(name, members, sizes, fabric))
        except (ValueError, KeyError) as exc:
            print(f"llmbench scale: {name}: not predicted: {exc}", file=sys.stderr)
    print(render(scales, fabric))
    out = Path(args.json) if args.json else root / "scale.json"
    out.write_text(json.dumps(to_json(scales, fabric), indent=1))
    print(f"\nfigures: {out}")
    if args.plot:
        from .scale_plot import draw

        print(f"plot: {draw(scales, Path(args.plot))}")
    return 0
