"""Runs inside each rank: Python's garbage collections during the measured window, and their time.

A collection stops the host thread that queues the GPU's work; when the host is what limits the
step (ZeRO-3's hooks, offload's optimizer on the CPU), a full collection through the objects a
process holds shows up as a slow step, and on several ranks as a step every rank waits for. The
window records how many collections of each generation ran and how long they held the thread, so
a noisy step time can be told apart from a noisy device.

Python runs a full collection once the objects that survived younger collections since the last
full one outnumber a quarter of the older ones. A fresh rank has just imported transformers and
DeepSpeed and built its model: hundreds of thousands of such objects, and its first window met a
full collection of 0.20 s inside a 10-step window of 0.18 s steps (1x H100, 2026-11-25,
fsdp_grad_op as a session's first configuration: +-8.9% where its warm siblings measured +-0.4%).
`collect_before_window` runs that collection before the window opens instead.
"""

from __future__ import annotations

import gc
import time
from typing import Any


def collect_before_window() -> None:
    """A full collection now, outside the measured steps, so that the next one is far off."""
    gc.collect()


class GcPauses:
    """Collections between start() and stop(), counted by generation, with their pause time."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.pause_s = 0.0
        self.longest_s = 0.0
        self._began: float | None = None

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        if self._began is None:  # started before start(): not ours to count
            return
        took = time.perf_counter() - self._began
        self._began = None
        self.count[info["generation"]] += 1
        self.pause_s += took
        self.longest_s = max(self.longest_s, took)

    def start(self) -> None:
        gc.callbacks.append(self._observe)

    def stop(self) -> dict[str, Any]:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)
        return {"collections": list(self.count), "pause_sec": self.pause_s, "longest_sec": self.longest_s}
