"""Runs inside each rank: what memory a run holds, measured rather than estimated.

- Device peaks come from the CUDA caching allocator (allocated and reserved), reset when the
  measured steps start.
- Model states are counted by a census of live tensors: every tensor the process holds, each
  storage once, parameters' gradients included. It is taken at the end of autograd's backward of
  one untimed step (`census_at_end_of_backward`), after every hook and autograd callback of that
  backward and before any strategy code that runs after autograd returns: parameters, gradients
  and optimizer state all exist and activations are gone. There DeepSpeed's ZeRO-1 still holds
  full gradients (its epilogue keeps only its partition's), which tells it from ZeRO-2. It reads
  what the strategy actually allocated on this rank (a sharded parameter counts its local shard),
  on CPU and GPU alike, and keeps the device's share apart from host memory (where offload puts
  states).
- On the CPU the process's peak resident set (VmHWM) stands in for device memory; Linux lets a
  process reset it, so it too covers only the measured steps.
- Between runs in one process (warm ranks, in-rank and in-process sessions) `release` hands back
  what the last run held and resets the statistics, so each run's numbers read as if fresh.
  `leftover` then checks it: what the process still holds beyond what it held before its first
  run (device memory on a GPU, live tensors on a CPU), and which live tensors make it up.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .live_objects import live_tensors, settle, thaw

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn


def census_bytes(collect: bool = True) -> dict[str, int]:
    """Bytes of distinct tensor storages alive in this process, by device type (cuda, cpu).
    `collect=False` where the caller has just collected."""
    # garbage in reference cycles (a strategy's temporaries) is still listed by get_objects()
    # until the collector runs; without this the census drifts by a buffer from run to run
    if collect:
        gc.collect()
    seen: set[int] = set()
    totals: dict[str, int] = {}
    for obj in live_tensors():
        _count(obj, seen, totals)
        grad = _grad(obj)
        if grad is not None:
            _count(grad, seen, totals)
    return totals


def _grad(t: torch.Tensor) -> torch.Tensor | None:
    """A parameter's gradient. One autograd just wrote has no Python object until someone reads
    .grad, so gc.get_objects() alone would miss it."""
    try:
        return t.grad if t.is_leaf and t.requires_grad else None
    except (RuntimeError, NotImplementedError, TypeError):
        return None  # wrapper tensors that keep no gradient of their own


def _count(t: torch.Tensor, seen: set[int], totals: dict[str, int]) -> None:
    local = getattr(t, "_local_tensor", None)  # DTensor: count this rank's shard
    if isinstance(local, torch.Tensor):
        t = local
    try:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return  # meta or wrapper tensors own no memory
    if ptr == 0 or ptr in seen:
        return
    seen.add(ptr)
    kind = storage.device.type
    totals[kind] = totals.get(kind, 0) + storage.nbytes()


def census_at_end_of_backward(
    module: nn.Module, backward: Callable[[], Any]
) -> tuple[dict[str, int] | None, float]:
    """Run `backward()` (forward and backward of one micro-batch through `module`, however a
    strategy wraps it) and take the census when autograd's backward ends: the census (None if it
    never ran) and the seconds it took, which are not the step's.

    A hook on the module's outputs fires as backward starts and queues an autograd final
    callback; that callback queues the census behind every callback queued after it (DDP's and
    FSDP's end-of-backward work), so the census sees each strategy's state once autograd is done
    with it, and before code a strategy runs after autograd returns (DeepSpeed's epilogue)."""
    engine = torch.autograd.Variable._execution_engine
    out: dict[str, dict[str, int]] = {}
    queued: list[bool] = []
    seconds: list[float] = []

    def census() -> None:
        if torch.cuda.is_initialized():
            # the step's queued kernels finish first, so the seconds timed are the census's alone
            # (a warm-up step's recorded time leaves them out: worker/loop.py)
            torch.cuda.synchronize()
        started = time.perf_counter()
        out["census"] = census_bytes()
        seconds.append(time.perf_counter() - started)

    def behind_the_others() -> None:
        engine.queue_callback(census)

    def on_output_grad(grad: torch.Tensor) -> None:
        if not queued:  # the first output gradient of this backward, once
            queued.append(True)
            engine.queue_callback(behind_the_others)

    def on_forward(_module: nn.Module, _args: Any, output: Any) -> None:
        for t in _tensors(output):
            if t.requires_grad:
                t.register_hook(on_output_grad)

    handle = module.register_forward_hook(on_forward)
    try:
        backward()
    finally:
        handle.remove()
    return out.get("census"), sum(seconds)


def _tensors(output: Any) -> list[torch.Tensor]:
    """The tensors of a module's output: a tensor, a tuple or list, or a dict-like ModelOutput."""
    if isinstance(output, torch.Tensor):
        return [output]
    values = (
        output.values() if isinstance(output, dict) else output if isinstance(output, tuple | list) else ()
    )
    return [v for v in values if isinstance(v, torch.Tensor)]


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
    window_start_allocated: int | None = None
    """Device memory allocated when the window started: a warm rank's equals a fresh rank's."""

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.window_start_allocated = torch.cuda.memory_allocated(self.device)
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
            out["window_start_allocated_bytes"] = self.window_start_allocated
        return out


LEFTOVER_LIMIT_BYTES = 64 << 20
"""What a warm rank may hold after a run beyond a fresh rank's level: more, and the next run's
memory figures would not read as a fresh process's (the group then ends: worker/main.py)."""


@dataclass
class FreshLevel:
    """What this process held before its first run: the level every later run must return to."""

    device_bytes: int
    """Allocated device memory on a GPU; on a CPU the bytes of live tensors (the census)."""
    tensor_ids: set[int] = field(default_factory=set)


_FRESH: dict[str, FreshLevel] = {}


HISTORY_ENV = "LLMBENCH_MEMORY_HISTORY"
"""Set (to any value) on a GPU: the CUDA allocator records where each block was allocated, and a
run that leaves device memory behind names the Python lines that allocated it (slower steps)."""


def has_fresh_level(device: torch.device) -> bool:
    """Whether this process has taken its level on `device` (its first run has started)."""
    return device.type in _FRESH


def fresh_level(device: torch.device) -> FreshLevel:
    """This process's level before its first run on `device` (taken at the first call)."""
    if device.type not in _FRESH:
        if device.type == "cuda" and os.environ.get(HISTORY_ENV):
            torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
        gc.collect()
        _FRESH[device.type] = FreshLevel(_held_bytes(device), {id(t) for t in _live_tensors(device.type)})
        settle()  # the imports so far: no later collection walks them (live_objects.py)
    return _FRESH[device.type]


def _beyond_fresh(device: torch.device, fresh: FreshLevel) -> int:
    """Bytes held now beyond the fresh level (called just after a collection)."""
    return max(0, _held_bytes(device) - fresh.device_bytes)


def beyond_limit(device: torch.device, fresh: FreshLevel) -> bool:
    """Whether this process holds more than LEFTOVER_LIMIT_BYTES beyond its fresh level now (after
    a teardown's collection): what `leftover` would report."""
    return _beyond_fresh(device, fresh) > LEFTOVER_LIMIT_BYTES


def _held_bytes(device: torch.device) -> int:
    """Called just after a collection."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device)
    return census_bytes(collect=False).get(device.type, 0)


def _live_tensors(device_type: str) -> list[torch.Tensor]:
    return [t for t in live_tensors() if _device_type(t) == device_type]


def _device_type(t: torch.Tensor) -> str | None:
    try:
        return t.device.type
    except (RuntimeError, NotImplementedError):
        return None


def leftover(device: torch.device, fresh: FreshLevel, named: int = 5) -> dict[str, Any]:
    """After `release`: the bytes held beyond the fresh level, and the largest live tensors that
    were not alive then, each with what holds it ("Parameter 4096x2048 bfloat16, 16.0 MiB, held
    by: dict of llmbench_pytest.worker.faults"). Memory no Python tensor accounts for (a library's
    C++ buffers) shows in the bytes but names nothing."""
    gc.collect()
    extra = _beyond_fresh(device, fresh)
    if extra > LEFTOVER_LIMIT_BYTES:
        # before naming a leftover: a full collection, garbage among the frozen objects included
        thaw()
        gc.collect()
        extra = _beyond_fresh(device, fresh)
    tensors = [t for t in _live_tensors(device.type) if id(t) not in fresh.tensor_ids]
    sizes = {}
    for t in tensors:
        seen: set[int] = set()
        size: dict[str, int] = {}
        _count(t, seen, size)
        sizes[id(t)] = size.get(device.type, 0)
    tensors.sort(key=lambda t: sizes[id(t)], reverse=True)
    top = tensors[:named]
    names = [_describe(t, sizes[id(t)], {id(tensors), id(top)}) for t in top if sizes[id(t)] > 0]
    out: dict[str, Any] = {"bytes": extra, "tensors": names}
    if device.type == "cuda" and os.environ.get(HISTORY_ENV):
        out["allocated_at"] = _allocation_sites(named)
    return out


def _allocation_sites(named: int) -> list[str]:
    """The Python lines that allocated the device blocks still live, largest total first (from the
    allocator's history: HISTORY_ENV)."""
    sites: dict[str, int] = {}
    for segment in torch.cuda.memory._snapshot()["segments"]:
        for block in segment["blocks"]:
            if block["state"] != "active_allocated":
                continue
            frames = [f for f in block.get("frames", []) if f.get("filename", "").endswith(".py")]
            where = " < ".join(f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in frames[:4])
            sites[where or "no Python frame"] = sites.get(where or "no Python frame", 0) + block["size"]
    ranked = sorted(sites.items(), key=lambda kv: kv[1], reverse=True)[:named]
    return [f"{size / 2**20:.1f} MiB at {where}" for where, size in ranked]


def _describe(t: torch.Tensor, nbytes: int, mine: set[int]) -> str:
    shape = "x".join(map(str, t.shape)) or "scalar"
    dtype = str(t.dtype).removeprefix("torch.")
    return f"{type(t).__name__} {shape} {dtype}, {nbytes / 2**20:.1f} MiB, held by: {_holders(t, mine)}"


def _holders(t: torch.Tensor, mine: set[int]) -> str:
    """What refers to `t`, named by what owns it, two levels up at most: a module's globals by the
    module ("list in globals of llmbench_pytest.worker.faults"), an object's attributes by its
    class ("dict in attributes of torch.nn.modules.linear.Linear"), else the container's type."""
    modules = {id(vars(m)): name for name, m in list(sys.modules.items()) if m is not None}
    mine = mine | {id(sys._getframe())}
    out = set()
    for ref in gc.get_referrers(t):
        if id(ref) in mine or type(ref).__name__ == "frame":
            continue  # this module's own lists and frames
        owner = _owner(ref, modules, mine)
        if owner is None:
            parents = [_owner(r, modules, mine) for r in gc.get_referrers(ref) if id(r) not in mine]
            named = sorted({p for p in parents if p})
            owner = f"{type(ref).__name__} in {named[0]}" if named else type(ref).__name__
        out.add(owner)
    return ", ".join(sorted(out)[:4]) or "nothing Python can see (C++ or a cycle's garbage)"


def _owner(ref: Any, modules: dict[int, str], mine: set[int]) -> str | None:
    if isinstance(ref, dict) and id(ref) in modules:
        return f"globals of {modules[id(ref)]}"
    if isinstance(ref, dict):
        for o in gc.get_referrers(ref):
            if id(o) not in mine and getattr(o, "__dict__", None) is ref:
                return f"attributes of {type(o).__module__}.{type(o).__qualname__}"
    return None


def release(device: torch.device, compiled: bool = False) -> None:
    """Leave the process as a fresh one would start the next run: compiled graphs dropped (they hold
    the last model's constants), garbage collected, the allocator's cache emptied and its peak and
    accumulated statistics (allocation retries) reset, and freed host memory returned to the system,
    so that the next run's peaks and counts are its own."""
    if compiled:
        # `import torch._dynamo` here would make `torch` a local name of this whole function, and
        # the CUDA branch below would read it unbound
        from torch import _dynamo

        _dynamo.reset()
    gc.collect()  # what this run created; what earlier runs left is frozen (live_objects.py)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        # cuBLAS keeps a workspace per handle and stream (tens of MiB) allocated for good; a fresh
        # process has none until its first matmul, and neither should the next run
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
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
