"""Number formatting and column alignment shared by the console tables, the markdown, `compare` and
the gate. Standard library only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

NA = "-"


def tokens(x: float | None) -> str:
    """12,345 (tokens/s and samples/s read best as grouped integers; small CPU rates keep a decimal)."""
    if x is None:
        return NA
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def seconds(x: float | None) -> str:
    if x is None:
        return NA
    return f"{x:.4f}" if x < 1 else f"{x:.3f}"


def gb(x: float | None) -> str:
    """GB: one decimal from 10 GB, two from 1 GB, three below (tiny CPU models)."""
    if x is None:
        return NA
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: 0.0512 -> '5.1%'."""
    if x is None:
        return NA
    return f"{x * 100:.{digits}f}%"


def signed_pct(x: float | None) -> str:
    """A relative change: 0.0512 -> '+5.1%'."""
    if x is None:
        return NA
    return f"{x * 100:+.1f}%"


def money(x: float | None) -> str:
    if x is None:
        return NA
    if x >= 100:
        return f"${x:,.0f}"
    return f"${x:.2f}" if x >= 1 else f"${x:.4f}"


def ratio(x: float | None) -> str:
    return NA if x is None else f"{x:.2f}x"


def mfu(x: float | None) -> str:
    """MFU keeps two significant figures below 1%, where tiny models on big GPUs land."""
    if x is None:
        return NA
    return f"{x * 100:.1f}%" if x >= 0.01 else f"{x * 100:.2g}%"


def ms(seconds: float | None) -> str:
    """Seconds shown as milliseconds: 0.0477 -> '47.7 ms' (time in collectives per step)."""
    if seconds is None:
        return NA
    x = seconds * 1000
    if x == 0:
        return "0 ms"
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.1f} ms" if x >= 1 else f"{x:.2f} ms"


def gbps(x: float | None) -> str:
    """GB/s: whole numbers from 100, one decimal from 1, two below; '<0.01' for a trickle."""
    if x is None:
        return NA
    if x == 0:
        return "0"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.2f}" if x >= 0.01 else "<0.01"


def whole(x: float | None) -> str:
    """Watts, MHz, degrees, percent utilisation: no decimals carry meaning there."""
    return NA if x is None else f"{x:,.0f}"


NUMERIC_COLUMNS = (
    "GPUs",
    "ranks",
    "seq",
    "world size",
    "tokens/s",
    "step s",
    "step CV",
    "mean +-",
    "peak GB",
    "MFU",
    "efficiency",
    "speed-up",
    "$/1M tokens",
    "$/1K samples",
    "step time",
    "peak memory",
    "its peak",
    "did not fit",
    # the GPU-measurement sections (markdown_gpu.py)
    "measured GB",
    "host GB",
    "predicted GB",
    "gap",
    "in collectives",
    "exposed",
    "bus GB",
    "H2D",
    "link",
    "util",
    "power",
    "SM MHz",
    "max °C",
)


def colalign(headers: Sequence[str]) -> list[str]:
    """Numbers right-aligned so their digits line up; text left."""
    return ["right" if h.startswith(NUMERIC_COLUMNS) else "left" for h in headers]
