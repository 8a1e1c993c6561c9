"""Runs inside each rank: what the host-to-device link can do, measured once per run.

A pinned-memory copy of 256 MiB to the GPU, timed with CUDA events, best of five: the link's
achievable GB/s, next to which the run's measured host-to-device traffic can be read.
"""

from __future__ import annotations

import torch

PROBE_BYTES = 256 << 20


def h2d_link_gbps(device: torch.device, nbytes: int = PROBE_BYTES, repeats: int = 5) -> float | None:
    if device.type != "cuda":
        return None
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)  # touch the pages: the probe times the copy, not first-touch faults
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dev.copy_(host, non_blocking=True)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    del host, dev
    return nbytes / best / 1e9
