"""What a run measured, combined over ranks: the hand-off from the worker side to results.

Standard library only. Every rank holds the same Measurement after a run, so every rank
reaches the same verdict in the validation checks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "oom", "error", "interrupted", "running", "unavailable")


@dataclass
class Measurement:
    status: str
    """ok, oom (out of memory), error, interrupted, or unavailable (a technique this device or
    install cannot run: the test is skipped with the reason)."""
    error: str | None = None
    """The first failing rank's message, prefixed with its rank."""
    failed_ranks: list[int] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    """Seconds per measured step, each the slowest rank's."""
    losses: list[float] = field(default_factory=list)
    """Loss per measured step, averaged over ranks."""
    warmup_losses: list[float] = field(default_factory=list)
    window_s: float | None = None
    """Host-clock time of the measured window (slowest rank), synchronized at both ends."""
    timing_method: str | None = None
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    """Each rank's memory, census and mean step time."""
    model: dict[str, Any] = field(default_factory=dict)
    strategy: dict[str, Any] = field(default_factory=dict)
    setup_s: float | None = None
    """Seconds to build the model and wrap it (not part of any throughput figure)."""
    env: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)
    """Where the configuration's time went in the ranks: setup phases (build, wrap, data, probe),
    DeepSpeed ops built or loaded, the measurement's plan and why it stopped."""
    link: dict[str, Any] | None = None
    """The link between the ranks as the group's probe measured it (worker/link_probe.py): busbw of
    all_reduce, all_gather and reduce_scatter by message size, and their latency; None at one rank."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def keeps_warm(self) -> bool:
        """Whether the ranks may serve the next configuration: the run ended ok and every rank
        handed back what it held (worker/memory.leftover within its limit) and left torch's
        process-wide settings as a fresh rank has them (worker/process_settings)."""
        left = [r.get("leftover") or {} for r in self.per_rank]
        handed_back = all(x.get("bytes", 0) <= x.get("limit_bytes", float("inf")) for x in left)
        return self.ok and handed_back and not any(x.get("settings") for x in left)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
