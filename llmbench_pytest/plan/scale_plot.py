"""`llmbench scale --plot`: predicted tokens/s and scaling efficiency against GPUs, one line per
configuration, measured world sizes marked. matplotlib is imported here only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from .scale import ConfigScale


def draw(scales: Sequence[ConfigScale], path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("llmbench scale --plot needs matplotlib: pip install matplotlib") from None
    fig, (tps, eff) = plt.subplots(1, 2, figsize=(12, 4.5))
    for s in scales:
        xs = [p.world_size for p in s.predictions]
        line = tps.plot(xs, [p.tokens_per_sec for p in s.predictions], marker=".", label=s.name)[0]
        eff.plot(xs, [p.efficiency * 100 for p in s.predictions], marker=".", color=line.get_color())
        measured = [p for p in s.predictions if p.measured]
        tps.plot(
            [p.world_size for p in measured],
            [p.tokens_per_sec for p in measured],
            "o",
            color=line.get_color(),
        )
    for ax in (tps, eff):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(alpha=0.3)
    tps.set_yscale("log")
    tps.set_ylabel("tokens/s (predicted; dots measured)")
    eff.set_ylabel("scaling efficiency, % of linear")
    tps.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
