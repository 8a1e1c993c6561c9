"""Number formatting shared by the console tables, the markdown and the gate. Standard library only."""

from __future__ import annotations

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
