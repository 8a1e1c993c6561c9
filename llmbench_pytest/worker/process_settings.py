"""torch's process-wide settings, compared after every run with a fresh rank's.

A warm rank serves configuration after configuration in one process. A run (or a library it
loads) that flips a process-wide switch and leaves it flipped (the default dtype or device, an
attention backend, autocast's dtype or weight cache, saved-tensor hooks that move activations)
would change what every later configuration of the group measures, its memory included, where a
fresh rank would not. So would a library that replaces one of torch's functions for the whole
process: DeepSpeed's ZeRO-3 swaps torch.nn.functional.linear for its own and leaves it swapped
("This will persist unless manually reset"); on 1x H100 a DDP run after it kept 2.78 GB less
activation memory and ran 2.5% slower than on a fresh rank, and a LoRA run 10 GB more (traced).
Each switch read here, and each function of the namespaces such libraries patch, is compared after
every run with its value before the process's first run; a changed one is named in the log and in
result.json
(`leftover_after_run.settings`) and ends the warm group, as memory a run fails to hand back does
(worker/memory.leftover): the next configuration starts in a fresh process. Setting a switch back
instead would be wrong where a library flips it when imported: a fresh process that imports it
has it flipped too.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True)
class Setting:
    name: str
    read: Callable[[], Any]


def _attr(owner: Any, attr: str, name: str) -> Setting:
    return Setting(name, lambda: getattr(owner, attr))


def _sdp(kind: str) -> Setting:
    return Setting(
        f"torch.backends.cuda.{kind}_sdp_enabled", getattr(torch.backends.cuda, f"{kind}_sdp_enabled")
    )


def _autocast_dtype(device: str) -> Setting:
    return Setting(f"autocast dtype ({device})", lambda: torch.get_autocast_dtype(device))


def _saved_tensor_hooks() -> Any:
    """The innermost default saved-tensor hooks (pack, unpack), or None: hooks left installed
    outside any run would pack every later run's activations their way."""
    top = torch._C._autograd._top_saved_tensors_default_hooks
    try:
        return top(False)
    except TypeError:  # older signatures take no argument
        return top()


@functools.cache
def _settings() -> tuple[Setting, ...]:
    """The settings this torch can read, found once per process (each is probed by reading it)."""
    found = [
        Setting("default dtype", torch.get_default_dtype),
        Setting("grad mode", torch.is_grad_enabled),
        Setting("float32 matmul precision", torch.get_float32_matmul_precision),
        Setting("deterministic algorithms", torch.are_deterministic_algorithms_enabled),
        Setting("anomaly detection", torch.is_anomaly_enabled),
        Setting("autocast weight cache", torch.is_autocast_cache_enabled),
        _autocast_dtype("cuda"),
        _autocast_dtype("cpu"),
        _attr(
            torch.backends.cuda.matmul,
            "allow_fp16_reduced_precision_reduction",
            "fp16 reduced-precision matmul sums",
        ),
        _attr(
            torch.backends.cuda.matmul,
            "allow_bf16_reduced_precision_reduction",
            "bf16 reduced-precision matmul sums",
        ),
        _attr(torch.backends.cudnn, "enabled", "torch.backends.cudnn.enabled"),
        _attr(torch.backends.cudnn, "benchmark", "torch.backends.cudnn.benchmark"),
        _attr(torch.backends.cudnn, "deterministic", "torch.backends.cudnn.deterministic"),
        *(_sdp(kind) for kind in ("flash", "mem_efficient", "math", "cudnn")),
        Setting("saved-tensor hooks", _saved_tensor_hooks),
    ]
    if hasattr(torch, "get_default_device"):
        found.append(Setting("default device", lambda: str(torch.get_default_device())))
    usable = []
    for setting in found:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a setting torch has deprecated is still read
                setting.read()
        except (AttributeError, RuntimeError, TypeError):
            continue  # not in this torch: nothing to compare
        usable.append(setting)
    return tuple(usable)


_REPLACEABLE = (
    ("torch.nn.functional", torch.nn.functional),
    ("torch.nn.Module", torch.nn.Module),
    ("torch.Tensor", torch.Tensor),
)
"""Namespaces whose functions libraries replace process-wide (DeepSpeed: functional.linear under
ZeRO-3; Module.__init__ and apply inside zero.Init). torch's top level is left out: torch._dynamo
wraps torch.manual_seed when it is first imported, which a fresh process importing it does too."""


def _functions() -> dict[str, Any]:
    """The functions of _REPLACEABLE by qualified name (the objects: compared by identity)."""
    return {
        f"{label}.{name}": value
        for label, owner in _REPLACEABLE
        for name, value in list(vars(owner).items())
        if callable(value) and not isinstance(value, type)
    }


def snapshot() -> dict[str, Any]:
    """Every readable setting's value now, and every replaceable function."""
    values = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for setting in _settings():
            values[setting.name] = setting.read()
    values.update(_functions())
    return values


def describe(value: Any) -> str:
    """A function as where it is defined (what replaced it says who did), anything else as text."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', None) or '?'}.{value.__qualname__}"
    return str(value)


def changed(fresh: dict[str, Any]) -> list[dict[str, str]]:
    """Every setting or function that differs from `fresh` (a snapshot before the first run): its
    name, the fresh value and the value the run left."""
    now = snapshot()
    return [
        {"setting": name, "fresh": describe(was), "left": describe(now[name])}
        for name, was in fresh.items()
        if name in now and now[name] is not was and now[name] != was
    ]


_FRESH: dict[str, Any] = {}


def fresh() -> dict[str, Any]:
    """The settings before this process's first run (taken at the first call, beside the memory
    level of worker/memory.fresh_level)."""
    if not _FRESH:
        _FRESH.update(snapshot())
    return _FRESH
