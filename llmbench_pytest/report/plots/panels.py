"""What goes in which plot: panels by model, sequence length, precision and hardware, a line per
strategy and batch in each, and one colour and marker per strategy in every plot.

Standard library only: charts.py draws these with matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..configs import STRATEGY_ORDER, Config, strategy_rank, technique_label

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_PANELS = 9
# fixed per strategy so a colour means the same thing in every plot and every report
COLOURS = {
    "ddp": "#1f77b4",
    "fsdp_grad_op": "#17becf",
    "fsdp": "#ff7f0e",
    "zero0": "#7f7f7f",
    "zero1": "#bcbd22",
    "zero2": "#2ca02c",
    "zero3": "#d62728",
    "zero1_offload": "#e377c2",
    "zero2_offload": "#9467bd",
    "zero3_offload": "#8c564b",
    "zero3_nvme": "#000000",
}
EXTRA_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354")
MARKERS = "os^DvPX<>*hp"
LINESTYLES = ("-", "--", ":", "-.")


def style_map(strategies: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Strategy -> (colour, marker), fixed for known strategies, in name order for others."""
    out: dict[str, tuple[str, str]] = {}
    extra = iter(EXTRA_COLOURS * 4)
    for name in sorted(set(strategies), key=strategy_rank):
        i = STRATEGY_ORDER.index(name) if name in STRATEGY_ORDER else len(out)
        out[name] = (COLOURS.get(name) or next(extra), MARKERS[i % len(MARKERS)])
    return out


@dataclass(frozen=True)
class Panel:
    title: str
    is_cpu: bool
    configs: list[Config]


def panels(configs: Sequence[Config]) -> tuple[list[Panel], int]:
    """Panels by model, sequence length, precision and hardware; the MAX_PANELS largest, and how many
    were left out."""
    groups: dict[tuple[Any, ...], list[Config]] = {}
    for c in configs:
        k = c.key
        model = f"{k.model} ({k.workload})" if k.workload != "causal_lm" else k.model
        panel = (
            model,
            k.seq_len,
            k.dtype,
            k.grad_ckpt,
            k.compile,
            technique_label(k),
            k.hardware,
            k.nodes > 1,
        )
        groups.setdefault(panel, []).append(c)
    keys = sorted(groups, key=lambda g: -len(groups[g]))[:MAX_PANELS]
    out = []
    for g in sorted(keys):
        model, seq, dtype, ckpt, compiled, techniques, hw, multi = g
        where = "CPU smoke, not a performance claim" if hw == "CPU" else hw
        flags = (
            (", ckpt" if ckpt else "")
            + (", compile" if compiled else "")
            + (f", {techniques}" if techniques else "")
            + (", multi-node" if multi else "")
        )
        title = f"{model}, seq {seq}, {dtype}{flags}\n{where}"
        out.append(Panel(title, hw == "CPU", groups[g]))
    return out, len(groups) - len(keys)


def series(panel: Panel) -> dict[tuple[str, int, int], list[Config]]:
    """Lines of a panel: one per strategy and per-device batch, points sorted by world size."""
    lines: dict[tuple[str, int, int], list[Config]] = {}
    for c in panel.configs:
        lines.setdefault((c.strategy, c.key.per_device_batch, c.key.grad_accum), []).append(c)
    for pts in lines.values():
        pts.sort(key=lambda c: c.world_size)
    return dict(sorted(lines.items(), key=lambda kv: (strategy_rank(kv[0][0]), kv[0][1:])))
