"""Every live tensor of this process, found without walking every Python object each time.

The memory census (memory.py) lists tensors with gc.get_objects() after a gc.collect(). A rank that
has imported torch, transformers and DeepSpeed holds well over a million objects, and each full
collection and listing walked all of them: 0.2 s and 0.04 s on the 2-core CI VM, several of each per
configuration (2026-11-25, a cProfile of four configurations: 7 of their 16 s).

Between configurations a warm rank therefore moves what it still holds (imports, caches, the
process's own state) out of the collector's generations with gc.freeze() (`settle`): later
collections and listings walk only what the next configuration creates. gc.get_objects() no longer
lists the frozen objects, so the tensors among them are kept here as weak references and
`live_tensors` adds those still alive: the census sees what it saw before, every tensor once.
Frozen objects are never collected: cyclic garbage among them (an object that outlived one
configuration and is dropped in a later one) would stay. It cannot hide: its tensors are still
counted (device memory on a GPU, the census on a CPU), and before a leftover over the limit is
reported `thaw` undoes the freeze and a full collection runs first (memory.leftover).
"""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from collections.abc import Iterator

_FROZEN: list[weakref.ref[torch.Tensor]] = []
"""The tensors among the frozen objects (empty while nothing is frozen)."""


def _in_view() -> Iterator[torch.Tensor]:
    """The tensors among the objects the collector sees (not frozen)."""
    for obj in gc.get_objects():
        # type() rather than isinstance(): isinstance reads __class__, which some lazy objects
        # (deprecated torch aliases) answer with a warning
        if issubclass(type(obj), torch.Tensor):
            yield obj


def live_tensors() -> Iterator[torch.Tensor]:
    """Every tensor Python holds: the collector's objects, then the frozen ones still alive. A
    tensor is listed once: it is either in view or frozen."""
    yield from _in_view()
    for ref in _FROZEN:
        t = ref()
        if t is not None:
            yield t


def settle() -> None:
    """Freeze everything alive now, keeping a weak reference to each tensor among it. Called just
    after a collection (a teardown's and its leftover check's): garbage frozen by a caller that
    skipped it is collected at the next `thaw`."""
    try:
        kept = [weakref.ref(t) for t in _in_view()]
    except TypeError:  # a tensor type without weak references: leave everything in view
        return
    _FROZEN.extend(kept)
    gc.freeze()


def thaw() -> None:
    """Put the frozen objects back where the collector sees them (the next gc.collect() is full)."""
    gc.unfreeze()
    _FROZEN.clear()
