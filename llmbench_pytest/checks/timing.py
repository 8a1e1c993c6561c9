"""On a GPU, the per-step CUDA events and the host clock around the window tell the same time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping

TIMING_AGREEMENT = 0.02
"""CUDA events summed over the steps may differ from the host clock around the window by 2%."""
STEP_BOUNDARY_S = 0.001
"""Host time each step boundary may take outside every step's events (the loop's own Python
between one step's end event and the next one's start, and the window's two ends): on 1x H100,
llama-tiny, 3-step windows of about 0.07 s measured 0.5-0.9 ms a step (2026-11-24), 2-4% of so
short a window, while the 0.3 s steps of llama-1b make it 0.3%. A gap fails only beyond both."""


def check_timing(result: Mapping[str, Any]) -> CheckOutcome:
    """On a GPU, per-step CUDA events and synchronize + host clock tell the same time."""
    name = "timing_agreement"
    timing = result.get("timing") or {}
    gap = timing.get("events_vs_clock")
    if result.get("device") != "cuda" or gap is None:
        return CheckOutcome(name, None, "CPU steps are timed by the host clock alone")
    if result.get("workload") == "seq2seq":
        # its window spans whole epochs, waits for the data loader included: the gap is the point
        return CheckOutcome(name, None, "epochs include waiting for data by design: see data_wait_fraction")
    detail = (
        f"CUDA events sum to {timing['sum_of_steps_sec']:.4f} s, the host clock around the synchronized "
        f"window reads {timing['window_sec']:.4f} s ({gap:+.2%})"
    )
    if abs(gap) <= TIMING_AGREEMENT:
        return CheckOutcome(name, True, f"{detail}, within {TIMING_AGREEMENT:.0%}", gap, TIMING_AGREEMENT)
    unaccounted = abs(timing["window_sec"] - timing["sum_of_steps_sec"])
    boundaries = len(result.get("step_times_sec") or []) + 1
    if unaccounted <= STEP_BOUNDARY_S * boundaries:
        return CheckOutcome(
            name,
            True,
            f"{detail}: {unaccounted * 1e3:.2f} ms over {boundaries} step boundaries, within the "
            f"{STEP_BOUNDARY_S * 1e3:.0f} ms each the loop's own work between steps takes",
            gap,
            TIMING_AGREEMENT,
        )
    return CheckOutcome(
        name,
        False,
        f"{result.get('strategy')}: {detail}, beyond {TIMING_AGREEMENT:.0%}: time passed between steps "
        "that no step accounts for (host stalls, data loading, other processes on the GPU).",
        gap,
        TIMING_AGREEMENT,
    )
