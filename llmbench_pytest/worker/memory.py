"""Runs inside each rank: what memory a run holds, measured rather than estimated.

- Device peaks come from the CUDA caching allocator (allocated and reserved), reset when the
  measured steps start.
- Model states are counted by a census of live tensors: every tensor the process holds, each
  storage once, taken after backward and before the optimizer step, when parameters, gradients
  and optimizer state all exist and activations are gone. It reads what the strategy actually
  allocated on this rank (a sharded parameter counts its local shard), on CPU and GPU alike, and
  keeps the device's share apart from host memory (where offload puts states).
- On the CPU the process's peak resident set (VmHWM) stands in for device memory; Linux lets a
  process reset it, so it too covers only the measured steps.
- Between runs in one process (warm ranks, in-rank and in-process sessions) `release` hands back
  what the last run held and resets the statistics, so each run's numbers read as if fresh.
"""

from __future__ import annotations

import ctypes
import gc
from dataclasses import dataclass
from pathlib import Path

import torch


def census_bytes() -> dict[str, int]:
    """Bytes of distinct tensor storages alive in this process, by device type (cuda, cpu)."""
    # garbage in reference cycles (a strategy's temporaries) is still listed by get_objects()
    # until the collector runs; without this the census drifts by a buffer from run to run
    gc.collect()
    seen: set[int] = set()
    totals: dict[str, int] = {}
    for obj in gc.get_objects():
        # type() rather than isinstance(): isinstance reads __class__, which some lazy
        # objects (deprecated torch aliases) answer with a warning
        if not issubclass(type(obj), torch.Tensor):
            continue
        t = obj
        local = getattr(t, "_local_tensor", None)  # DTensor: count this rank's shard
        if isinstance(local, torch.Tensor):
            t = local
        try:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
        except (RuntimeError, NotImplementedError, TypeError):
            continue  # meta or wrapper tensors own no memory
        if ptr == 0 or ptr in seen:
            continue
        seen.add(ptr)
        kind = storage.device.type
        totals[kind] = totals.get(kind, 0) + storage.nbytes()
    return totals


_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def _vm_hwm_bytes() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass
class PeakMemory:
    device: torch.device
    rss_reset: bool = False
    """Whether the CPU peak was reset at the window start (else it covers the process's life)."""

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        try:
            _CLEAR_REFS.write_text("5")  # "5" resets the peak RSS (VmHWM) to the current RSS
            self.rss_reset = True
        except OSError:
            self.rss_reset = False

    def read(self) -> dict[str, int | bool | None]:
        out: dict[str, int | bool | None] = {"peak_rss_bytes": _vm_hwm_bytes(), "rss_reset": self.rss_reset}
        if self.device.type == "cuda":
            out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(self.device)
            out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(self.device)
            out["device_total_bytes"] = torch.cuda.get_device_properties(self.device).total_memory
            out["alloc_retries"] = torch.cuda.memory_stats(self.device).get("num_alloc_retries", 0)
        return out


def release(device: torch.device, compiled: bool = False) -> None:
    """Leave the process as a fresh one would start the next run: compiled graphs dropped (they hold
    the last model's constants), garbage collected, the allocator's cache emptied and its peak and
    accumulated statistics (allocation retries) reset, and freed host memory returned to the system,
    so that the next run's peaks and counts are its own."""
    if compiled:
        import torch._dynamo

        torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.reset_accumulated_memory_stats(device)
    _trim_host_heap()


def _trim_host_heap() -> None:
    """glibc keeps freed small and medium blocks in its arenas: the resident set of a process that
    trained a big model stays high, and the next run's peak RSS (reset to the current RSS at the
    window) would start there. malloc_trim(0) hands the free pages back."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to trim, the CPU peak is then an upper bound
