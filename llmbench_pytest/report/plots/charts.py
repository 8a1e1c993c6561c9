"""summary/plots/*.png. The only module that imports matplotlib (optional: pip install llmbench[plots]).

One panel per model / sequence length / precision / hardware (panels.py); in it one line (or bar)
per strategy, each strategy with the same colour and marker in every plot. World sizes are the
measured ones, as integer ticks. A CPU panel says it is CPU smoke in its title.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import gpu_truth
from ..collect import ReportError
from ..configs import strategy_rank
from ..summary.recommend import PatternRules
from .panels import LINESTYLES, MAX_PANELS, Panel, panels, series, style_map

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from ..configs import Config, ConfigKey
    from ..scaling import Scaling

INSTALL_HINT = "pip install llmbench[plots]"
PLOT_FILES = (
    "tokens_per_sec_vs_gpu.png",
    "step_time_vs_gpu.png",
    "scaling_efficiency.png",
    "gbps_vs_gpu.png",
    "peak_memory_per_strategy.png",
    "mfu_per_strategy.png",
)
# drawn only when some multi-rank run was profiled (--llmbench-profile): most reports have no data
COMM_PLOT = "comm_time_per_strategy.png"


class PlotsUnavailable(ReportError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; no display needed (CI, ssh)
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotsUnavailable(
            f"plots need matplotlib, which is not installed: {INSTALL_HINT} (or pip install matplotlib); "
            "the CSV and the markdown report are written without it"
        ) from None
    return plt


def _ws_axis(ax: Any, world_sizes: Sequence[int], label: str) -> None:
    ws = sorted(set(world_sizes))
    if ws and ws[-1] / ws[0] >= 8:
        ax.set_xscale("log", base=2)  # 1, 2, 4, ... 64 GPUs spread evenly
    ax.set_xticks(ws)
    ax.set_xticklabels([str(w) for w in ws])
    ax.minorticks_off()
    if len(ws) == 1:
        ax.set_xlim(ws[0] - 1, ws[0] + 1)
    ax.set_xlabel(label)


# Fixed margins in inches rather than tight_layout: tight_layout measures every text artist and
# took most of the report's time on 1,000 results; the layout here is the same for any data.
PANEL_W, PANEL_H = 5.6, 4.2
LEFT, RIGHT_LEGEND, TOP, BOTTOM = 0.9, 2.1, 1.0, 0.7
GAP_W, GAP_H = 0.9, 1.3


def _grid(plt: Any, n: int, suptitle: str) -> tuple[Any, list[Any]]:
    cols = min(3, max(1, n))
    rows = math.ceil(max(1, n) / cols)
    width = LEFT + cols * PANEL_W + (cols - 1) * GAP_W + RIGHT_LEGEND
    height = TOP + rows * PANEL_H + (rows - 1) * GAP_H + BOTTOM
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(
        left=LEFT / width,
        right=1 - RIGHT_LEGEND / width,
        top=1 - TOP / height,
        bottom=BOTTOM / height,
        wspace=GAP_W / PANEL_W,
        hspace=GAP_H / PANEL_H,
    )
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    fig.suptitle(suptitle, fontsize=13, y=1 - 0.15 / height, va="top")
    return fig, flat[:n]


def _finish(ctx: _Ctx, fig: Any, axes: Sequence[Any], path: Path) -> Path:
    """One legend for the figure (a strategy has one colour in every panel), then save."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        width = fig.get_figwidth()
        fig.legend(
            list(seen.values()),
            list(seen.keys()),
            loc="upper left",
            bbox_to_anchor=(1 - (RIGHT_LEGEND - 0.15) / width, 1 - TOP / fig.get_figheight()),
            fontsize=9,
            frameon=False,
        )
    fig.savefig(path, dpi=90)
    ctx.plt.close(fig)
    return path


def _empty(ax: Any, text: str) -> None:
    """A panel with nothing to draw says why, instead of showing empty axes."""
    ax.text(0.5, 0.5, textwrap.fill(text, 50), ha="center", va="center", transform=ax.transAxes, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])


@dataclass(frozen=True)
class _Ctx:
    plt: Any
    panels: list[Panel]
    styles: dict[str, tuple[str, str]]
    scaling: Mapping[ConfigKey, Scaling]
    rules: PatternRules


def _line_plot(
    ctx: _Ctx,
    path: Path,
    suptitle: str,
    ylabel: Callable[[Panel], str],
    value: Callable[[Config], float | None],
    err: Callable[[Config], float | None] | None = None,
    empty_text: str = "not measured",
    decorate: Callable[[Any, Panel], None] | None = None,
    thousands: bool = False,
) -> Path:
    fig, axes = _grid(ctx.plt, len(ctx.panels), suptitle)
    for ax, panel in zip(axes, ctx.panels, strict=True):
        lines = series(panel)
        batches = {k[1:] for k in lines}
        drawn, all_ws = 0, []
        for (strategy, b, ga), line in lines.items():
            pts = [c for c in line if value(c) is not None]
            if not pts:
                continue
            colour, marker = ctx.styles[strategy]
            xs = [c.world_size for c in pts]
            ys = [value(c) for c in pts]
            errs = [(err(c) or 0.0) for c in pts] if err else []
            label = strategy if len(batches) == 1 else f"{strategy} (batch {b}x{ga})"
            style = LINESTYLES[sorted(batches).index((b, ga)) % len(LINESTYLES)]
            kw = {"label": label, "color": colour, "marker": marker, "linestyle": style, "ms": 6}
            if any(errs):
                ax.errorbar(xs, ys, yerr=errs, capsize=3, **kw)
            else:
                ax.plot(xs, ys, **kw)  # errorbar costs several artists per point even with no bars
            drawn += 1
            all_ws += xs
        ax.set_title(panel.title, fontsize=10)
        if not drawn:
            _empty(ax, empty_text)
            continue
        _ws_axis(ax, all_ws, "world size (CPU ranks)" if panel.is_cpu else "world size (GPUs)")
        ax.set_ylabel(ylabel(panel))
        ax.set_ylim(bottom=0)
        if thousands:
            ax.yaxis.set_major_formatter(ctx.plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.grid(True, alpha=0.3)
        if decorate:
            decorate(ax, panel)
    return _finish(ctx, fig, axes, path)


def _bar_plot(
    ctx: _Ctx,
    path: Path,
    suptitle: str,
    ylabel: Callable[[Panel], str],
    value: Callable[[Config], float | None],
    empty_text: Callable[[Panel], str],
    inner: tuple[str, Callable[[Config], float | None]] | None = None,
) -> Path:
    """Bars grouped by world size, one bar per strategy in its colour; `inner` overlays a hatched
    bar (model states inside peak memory)."""
    fig, axes = _grid(ctx.plt, len(ctx.panels), suptitle)
    for ax, panel in zip(axes, ctx.panels, strict=True):
        ax.set_title(panel.title, fontsize=10)
        # only finished configurations: a run that ran out of memory has no peak it could train at
        pts = [c for c in panel.configs if c.ok and value(c) is not None]
        ws_label = "world size (CPU ranks)" if panel.is_cpu else "world size (GPUs)"
        if not pts:
            _empty(ax, empty_text(panel))
            continue
        ws = sorted({c.world_size for c in pts})
        names = sorted({c.strategy for c in pts}, key=strategy_rank)
        width = 0.8 / len(names)
        # one bar() call per panel, not per strategy: matplotlib's per-call cost dominated the
        # report's time on large result sets; a square marker per strategy stands in the legend
        bars: list[tuple[float, float, str]] = []
        overlay: list[tuple[float, float]] = []
        for i, name in enumerate(names):
            # several batches of one strategy at one world size: the fastest stands for them (the
            # table has all)
            by_ws: dict[int, Config] = {}
            for c in (c for c in pts if c.strategy == name):
                best = by_ws.get(c.world_size)
                if best is None or (c.tokens_per_sec or 0) > (best.tokens_per_sec or 0):
                    by_ws[c.world_size] = c
            xs = [ws.index(w) + (i - (len(names) - 1) / 2) * width for w in by_ws]
            colour, _ = ctx.styles[name]
            bars += [(x, value(c) or 0.0, colour) for x, c in zip(xs, by_ws.values(), strict=True)]
            ax.plot([], [], marker="s", linestyle="", ms=9, color=colour, label=name)
            if inner:
                overlay += [(x, v) for x, c in zip(xs, by_ws.values(), strict=True) if (v := inner[1](c))]
        _bars(ax, [(x, h) for x, h, _ in bars], width * 0.9, facecolors=[c for _, _, c in bars])
        if inner and overlay:
            _bars(ax, overlay, width * 0.5, facecolors="none", edgecolors="black", hatch="///")
            ax.fill_between([], [], facecolor="none", edgecolor="black", hatch="///", label=inner[0])
        top = max(h for _, h, _ in bars)
        ax.set_xlim(-0.5, len(ws) - 0.5)
        ax.set_ylim(0, top * 1.08)
        ax.set_xticks(range(len(ws)))
        ax.set_xticklabels([str(w) for w in ws])
        ax.set_xlabel(ws_label)
        ax.set_ylabel(ylabel(panel))
        ax.grid(True, axis="y", alpha=0.3)
    return _finish(ctx, fig, axes, path)


def _bars(ax: Any, bars: Sequence[tuple[float, float]], width: float, **style: Any) -> None:
    """Bars from 0 as one PolyCollection: a Rectangle artist per bar (ax.bar) made the bar plots
    the slowest part of a report on a thousand results."""
    from matplotlib.collections import PolyCollection

    verts = [
        [(x - width / 2, 0), (x - width / 2, h), (x + width / 2, h), (x + width / 2, 0)] for x, h in bars
    ]
    ax.add_collection(PolyCollection(verts, linewidths=0.8 if "hatch" in style else 0, **style))


def _scaling_decor(ctx: _Ctx) -> Callable[[Any, Panel], None]:
    def decorate(ax: Any, panel: Panel) -> None:
        ax.axhline(100, color="black", linestyle="--", linewidth=1, label="linear (ideal)")
        ax.axhline(
            ctx.rules.poor_scaling * 100, color="grey", linestyle=":", linewidth=1, label="poor-scaling line"
        )
        bases = sorted({(s.mode, s.baseline_ws) for c in panel.configs if (s := ctx.scaling.get(c.key))})
        one = "1-rank run" if panel.is_cpu else "1-GPU run"
        text = "; ".join(f"{m}: vs ws{w}" + (f" ({one})" if w == 1 else f" (no {one})") for m, w in bases)
        ax.set_title(f"{panel.title}\nbaseline {text}", fontsize=10)
        top = max([100.0] + [s.efficiency * 100 for c in panel.configs if (s := ctx.scaling.get(c.key))])
        ax.set_ylim(0, top * 1.15)

    return decorate


def _comm_ms(c: Config, key: str = "comm_sec_per_step") -> float | None:
    """Milliseconds per step in collectives; none at one rank, where there is nothing to move."""
    if c.world_size < 2:
        return None
    sec = gpu_truth.config_comm(c, key)
    return sec * 1000 if sec is not None else None


def write_plots(
    out_dir: Path,
    configs: Sequence[Config],
    scaling: Mapping[ConfigKey, Scaling],
    rules: PatternRules | None = None,
) -> tuple[list[Path], str | None]:
    """Write every plot into out_dir; returns the paths and a note when panels were left out.

    Raises PlotsUnavailable (with the install hint) when matplotlib is missing."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen, left_out = panels(configs)
    ctx = _Ctx(plt, chosen, style_map([c.strategy for c in configs]), scaling, rules or PatternRules())
    paths = [*_vs_world_size(ctx, out_dir, scaling), *_per_strategy(ctx, out_dir)]
    comm = _comm_plot(ctx, out_dir, configs)
    if comm is not None:
        paths.append(comm)
    note = None
    if left_out:
        note = (
            f"The plots show the {MAX_PANELS} largest groups (model, sequence length, precision, hardware); "
            f"{left_out} more are in the tables and metrics.csv only."
        )
    return paths, note


def _vs_world_size(ctx: _Ctx, out_dir: Path, scaling: Mapping[ConfigKey, Scaling]) -> list[Path]:
    """Throughput, step time, scaling efficiency and host-to-device rate against the world size."""
    return [
        _line_plot(
            ctx,
            out_dir / PLOT_FILES[0],
            "Throughput vs world size (error bars: std over repeated runs, where repeated)",
            lambda p: "throughput (tokens/s, whole job)",
            lambda c: c.tokens_per_sec,
            lambda c: c.tokens_per_sec_spread,
            thousands=True,
        ),
        _line_plot(
            ctx,
            out_dir / PLOT_FILES[1],
            "Step time vs world size (error bars: step-time std within the run)",
            lambda p: "mean step time (s)",
            lambda c: c.step_time,
            lambda c: c.step_time_std,
        ),
        _line_plot(
            ctx,
            out_dir / PLOT_FILES[2],
            "Scaling efficiency: T(N) / ((N/N0) x T(N0))",
            lambda p: "scaling efficiency (%)",
            lambda c: s.efficiency * 100 if (s := scaling.get(c.key)) else None,
            empty_text="one world size measured: nothing to scale against",
            decorate=_scaling_decor(ctx),
        ),
        _line_plot(
            ctx,
            out_dir / PLOT_FILES[3],
            "Host-to-device transfer rate vs world size",
            lambda p: "host-to-device (GB/s per GPU)",
            lambda c: c.h2d_gbps,
            empty_text="not measured: host-to-device traffic is measured on GPU runs only",
        ),
    ]


def _per_strategy(ctx: _Ctx, out_dir: Path) -> list[Path]:
    """Peak memory (model states inside) and MFU, one bar per strategy."""
    mem = {True: "peak host RSS per rank (GB)", False: "peak GPU memory allocated per rank (GB)"}
    return [
        _bar_plot(
            ctx,
            out_dir / PLOT_FILES[4],
            "Peak memory per strategy (hatched: model states after backward)",
            lambda p: mem[p.is_cpu],
            lambda c: c.memory_gb,
            lambda p: "peak memory not measured",
            inner=("model states", lambda c: c.model_state_gb),
        ),
        _bar_plot(
            ctx,
            out_dir / PLOT_FILES[5],
            "Model FLOPs utilisation per strategy",
            lambda p: "MFU (% of peak dense FLOP/s)",
            lambda c: c.mfu * 100 if c.mfu is not None else None,
            lambda p: "MFU n/a: " + next((c.mfu_reason for c in p.configs if c.mfu_reason), "not recorded"),
        ),
    ]


def _comm_plot(ctx: _Ctx, out_dir: Path, configs: Sequence[Config]) -> Path | None:
    """Time in collectives per strategy, where a profiled run of 2 or more ranks measured it."""
    if not any(_comm_ms(c) for c in configs):
        return None
    # CPU runs have no exposed time (no CUDA streams to overlap on): no hatching to explain
    hatched = any(_comm_ms(c, "comm_exposed_sec_per_step") for c in configs)
    return _bar_plot(
        ctx,
        out_dir / COMM_PLOT,
        "Time in collectives per step"
        + (" (hatched: exposed, not overlapped with compute)" if hatched else ""),
        lambda p: "time in collectives (ms per step, busiest rank)",
        _comm_ms,
        lambda p: "no profiled run with 2 or more ranks (--llmbench-profile)",
        inner=("exposed", lambda c: _comm_ms(c, "comm_exposed_sec_per_step")),
    )
