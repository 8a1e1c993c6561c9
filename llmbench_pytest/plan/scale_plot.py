"""`llmbench scale --plot`: predicted tokens/s and scaling efficiency against GPUs, one line per
configuration with its 90% interval shaded, measured world sizes marked. matplotlib is imported
here only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from .scale import ConfigScale


def _band(
    values: Sequence[tuple[float | None, float | None]], points: Sequence[float], scale: float = 1.0
) -> tuple[list[float], list[float]]:
    """(lows, highs) with a measured size's point standing for both ends."""
    lows = [(lo if lo is not None else p) * scale for (lo, _), p in zip(values, points, strict=True)]
    highs = [(hi if hi is not None else p) * scale for (_, hi), p in zip(values, points, strict=True)]
    return lows, highs


def draw(scales: Sequence[ConfigScale], path: Path, smoke: bool = False) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("llmbench scale --plot needs matplotlib: pip install matplotlib") from None
    fig, (tps, eff) = plt.subplots(1, 2, figsize=(12, 4.5))
    for s in scales:
        xs = [p.world_size for p in s.predictions]
        points = [p.tokens_per_sec for p in s.predictions]
        line = tps.plot(xs, points, marker=".", label=s.name)[0]
        color = line.get_color()
        tps.fill_between(
            xs, *_band([p.tokens_interval for p in s.predictions], points), color=color, alpha=0.15
        )
        effs = [p.efficiency for p in s.predictions]
        eff.plot(xs, [e * 100 for e in effs], marker=".", color=color)
        eff.fill_between(
            xs, *_band([p.efficiency_interval for p in s.predictions], effs, 100), color=color, alpha=0.15
        )
        measured = [p for p in s.predictions if p.measured]
        tps.plot([p.world_size for p in measured], [p.tokens_per_sec for p in measured], "o", color=color)
    unit = "CPU ranks (smoke: no GPU's figure)" if smoke else "GPUs"
    for ax in (tps, eff):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(unit)
        ax.grid(alpha=0.3)
    tps.set_yscale("log")
    tps.set_ylabel("tokens/s (predicted, 90% interval shaded; dots measured)")
    eff.set_ylabel("scaling efficiency, % of linear (90% interval shaded)")
    tps.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
