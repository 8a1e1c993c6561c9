"""What DeepSpeed's ZeRO-3 holds on the device beside the model states, from its settings and the
model's layout. Standard library only.

Read from DeepSpeed 0.19.8 (deepspeed/runtime/zero/stage3.py, partitioned_param_coordinator.py,
parameter_offload.py, partition_parameters.py); every size comes from the run's own
zero_optimization settings, DeepSpeed's defaults where a key is absent (`Zero3Settings.of`):

- a gradient partition per rank, allocated at initialisation and kept (stage3.py,
  `grad_partitions_flat_buffer`): the rank's share of the trained parameters in the gradient
  accumulation dtype (the model's own unless data_types.grad_accum_dtype says otherwise);
- one reduce bucket of reduce_bucket_size elements per communication dtype, allocated at
  initialisation where contiguous_gradients is on (`ipg_buckets[...].buffer`);
- gathered parameters. A module's parameters are gathered before it runs and released after,
  unless (`PartitionedParameterCoordinator.__params_to_release`) they are persistent
  (stage3_param_persistence_threshold: each parameter of at most that many elements, until
  stage3_model_persistence_threshold is reached; gathered from their first use until the
  optimizer step), or the trace of one forward and backward uses them again within
  stage3_max_reuse_distance elements of other parameters, or the prefetcher has already passed
  over a later use of theirs. Ahead of each module the prefetcher gathers up to
  stage3_prefetch_bucket_size elements of the parameters the trace needs next, as long as fewer
  than stage3_max_live_parameters are gathered. At the end of forward the last blocks are still
  gathered for their backward, which follows within the reuse distance: with DeepSpeed's default
  1e9 elements, the last 1e9 / (2 x a block's parameters) blocks or so, and a whole model of up to
  about 5e8 parameters (`gathered_at_end_of_forward` replays that logic over the model's modules
  in the order they run). A gathered parameter is a copy of its own (the all-gather's flat buffer
  is split into one tensor per parameter: AllGatherCoalescedHandle.wait); on one rank without
  parameter offload it is a view of the partition and costs nothing;
- in the optimizer step, per sub-group of at most sub_group_size elements of the rank's
  partition (filled parameter by parameter until it reaches that size), the flattened 16-bit
  gradients and their fp32 copy (stage3.py, `_prepare_fp32_grad_for_sub_group`): 6 bytes per
  element of the largest sub-group in bf16/fp16, 4 in fp32 (the copy is the tensor itself).

Measured against it, DeepSpeed's default buckets of the hidden size squared (4x H200, 2026-11-28,
llama-3b at batch 2 x 2048 and llama-7b at batch 1 x 2048): the peaks 12.1-13.7% above the
prediction that left these out were the gradient partition (3.43 GB for llama-3b at 2 GPUs) and
about 1.0e9 gathered elements (2 GB in bf16).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

MAXSIZE = 2**63 - 1
"""DeepSpeed's default stage3_model_persistence_threshold (sys.maxsize): no limit."""

DEFAULTS = {
    "reduce_bucket_size": 5e8,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_param_persistence_threshold": 1e5,
    "stage3_model_persistence_threshold": MAXSIZE,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "sub_group_size": 1e9,
}
"""DeepSpeed 0.19.8's defaults (deepspeed/runtime/zero/config.py) for the keys a config leaves out."""

_ALIASES = {  # DeepSpeed accepts the field's own name beside the stage3_ alias
    "stage3_prefetch_bucket_size": "prefetch_bucket_size",
    "stage3_param_persistence_threshold": "param_persistence_threshold",
    "stage3_model_persistence_threshold": "model_persistence_threshold",
    "stage3_max_live_parameters": "max_live_parameters",
    "stage3_max_reuse_distance": "max_reuse_distance",
}

Unit = tuple[tuple[int, int], ...]
"""The parameters one module gathers when it runs: (parameter id, elements) each."""


@dataclass(frozen=True, slots=True)
class Call:
    """One module's forward, in the order the forward runs them (plan/layout.py records it)."""

    path: str
    """The module's name in the model (named_modules), "" for the root."""
    cls: str
    """Its class, module.qualname."""
    params: Unit
    """Its own parameters (not its children's)."""
    block: str | None = None
    """The repeated block it belongs to (its path), which activation checkpointing recomputes."""


@dataclass(frozen=True, slots=True)
class Zero3Settings:
    """The zero_optimization settings ZeRO-3's memory depends on."""

    reduce_bucket: int
    contiguous_gradients: bool
    prefetch_bucket: int
    persistence_threshold: int
    model_persistence_threshold: int
    max_live: int
    max_reuse_distance: int
    sub_group_size: int
    leaf_classes: tuple[str, ...] = ()
    leaf_names: tuple[str, ...] = ()
    leaf_suffixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, zero: Mapping[str, Any]) -> Zero3Settings:
        """From a DeepSpeed config's zero_optimization section."""

        def size(key: str) -> int:
            value = zero.get(key, zero.get(_ALIASES.get(key, key)))
            return int(DEFAULTS[key] if value is None else value)

        leaf = zero.get("leaf_module") or {}

        def names(key: str) -> tuple[str, ...]:
            value = leaf.get(key) or ()
            return (value,) if isinstance(value, str) else tuple(str(v) for v in value)

        return cls(
            reduce_bucket=size("reduce_bucket_size"),
            contiguous_gradients=bool(zero.get("contiguous_gradients", True)),
            prefetch_bucket=size("stage3_prefetch_bucket_size"),
            persistence_threshold=size("stage3_param_persistence_threshold"),
            model_persistence_threshold=size("stage3_model_persistence_threshold"),
            max_live=size("stage3_max_live_parameters"),
            max_reuse_distance=size("stage3_max_reuse_distance"),
            sub_group_size=size("sub_group_size"),
            leaf_classes=names("classes"),
            leaf_names=names("names"),
            leaf_suffixes=names("name_suffixes"),
        )


@dataclass(frozen=True, slots=True)
class Zero3Held:
    """What ZeRO-3 holds per rank beside its parameter, master and optimizer partitions, in
    elements (`held_bytes` turns them into bytes)."""

    gathered: int
    """Parameters gathered whole at the end of forward (persistent ones included)."""
    reduce_bucket: int
    """The reduce bucket, allocated at initialisation (0 without contiguous_gradients)."""
    sub_group: int
    """Elements of the rank's largest optimizer sub-group."""
    grad_bytes: int
    """Bytes per element of the gradient partition (the accumulation dtype)."""


def fetch_order(calls: Sequence[Call], settings: Zero3Settings, grad_ckpt: bool) -> tuple[list[Unit], int]:
    """(the units one forward and backward fetches, in order; how many are the forward's). A
    ZeRO-3 leaf module (settings.leaf_*: DeepSpeed's leaf_module config) is fetched whole, its
    children with it. Backward runs the modules in reverse; with activation checkpointing each
    block first runs its forward again (non-reentrant checkpointing recomputes it as backward
    reaches it)."""
    leaves = [c.path for c in calls if _is_leaf(c, settings)]
    units: list[tuple[Unit, str | None]] = []
    inside: str | None = None
    for call in calls:
        if inside is not None and (call.path + ".").startswith(inside + "."):
            continue  # a leaf's child: fetched with the leaf
        inside = call.path if call.path in leaves else None
        params = call.params
        if inside is not None:
            prefix = "" if not call.path else call.path + "."
            params = tuple(dict(p for c in calls if c.path == call.path or c.path.startswith(prefix)
                                for p in c.params).items())  # fmt: skip
        if params:
            units.append((params, call.block))
    forward = [u for u, _ in units]
    backward: list[Unit] = []
    i = len(units)
    while i > 0:
        block = units[i - 1][1]
        start = i
        while start > 0 and block is not None and units[start - 1][1] == block:
            start -= 1
        segment = forward[start:i] if block is not None else forward[i - 1 : i]
        if block is not None and grad_ckpt:
            backward.extend(segment)
        backward.extend(reversed(segment))
        i = start if block is not None else i - 1
    return forward + backward, len(forward)


def _is_leaf(call: Call, settings: Zero3Settings) -> bool:
    short = call.cls.rsplit(".", 1)[-1]
    return (
        any(c in (call.cls, short) for c in settings.leaf_classes)
        or call.path in settings.leaf_names
        or any(call.path.endswith(s) for s in settings.leaf_suffixes)
    )


def persistent(params: Iterable[tuple[int, int]], settings: Zero3Settings) -> set[int]:
    """Ids of the parameters ZeRO-3 keeps gathered through forward and backward, from (id,
    elements) in named_parameters order (parameter_offload.mark_persistent_parameters)."""
    out: set[int] = set()
    total = 0
    for pid, numel in params:
        if numel + total > settings.model_persistence_threshold:
            continue
        if numel <= settings.persistence_threshold:
            out.add(pid)
            total += numel
    return out


def gathered_at_end_of_forward(
    order: Sequence[Unit], forward_units: int, persist: set[int], settings: Zero3Settings
) -> int:
    """Elements gathered when the last forward module has run (the loss follows), once the trace
    is complete (from the third step on): DeepSpeed's fetch, prefetch and release replayed over
    `order`, the modules with parameters in the order one forward and backward fetches them, the
    first `forward_units` of them the forward's (module docstring)."""
    numel = {pid: n for unit in order for pid, n in unit}
    queue = collections.deque((pid, step) for step, unit in enumerate(order) for pid in sorted(dict(unit)))
    passed: dict[int, int] = collections.defaultdict(lambda: -(10**18))  # the latest use popped
    held: set[int] = set()
    live = 0
    for step, unit in enumerate(order[:forward_units]):
        params = {pid for pid, _ in unit}
        for pid in params - held:
            held.add(pid)
            live += numel[pid]
        due = {pid for pid in params if passed[pid] < step}
        popped: set[int] = set()
        while queue and len(popped) < len(due):
            pid, at = queue.popleft()
            passed[pid] = at
            popped.add(pid)
        live += _prefetch(queue, passed, held, numel, min(settings.max_live - live, settings.prefetch_bucket))
        for pid in _to_release(order, step + 1, params, persist, passed, settings.max_reuse_distance):
            if pid in held:
                held.discard(pid)
                live -= numel[pid]
    return sum(numel[pid] for pid in held)


def _prefetch(
    queue: collections.deque[tuple[int, int]],
    passed: dict[int, int],
    held: set[int],
    numel: Mapping[int, int],
    space: int,
) -> int:
    """The prefetcher: the next parameters of the trace not gathered yet, up to `space` elements;
    it passes over (and marks) the uses of those already gathered. Returns the elements added."""
    fetched = 0
    while queue and fetched < space:
        pid, at = queue.popleft()
        passed[pid] = max(passed[pid], at)
        if pid not in held:
            held.add(pid)
            fetched += numel[pid]
    return fetched


def _to_release(
    order: Sequence[Unit],
    next_step: int,
    params: set[int],
    persist: set[int],
    passed: Mapping[int, int],
    reuse: int,
) -> set[int]:
    """PartitionedParameterCoordinator.__params_to_release: not persistent, no later use already
    passed over by the prefetcher, and not used again within `reuse` elements."""
    out = {pid for pid in params if pid not in persist and passed[pid] <= next_step}
    traversed = 0
    for unit in order[next_step:]:
        if traversed >= reuse or not out:
            break
        for pid, n in unit:
            out.discard(pid)
            traversed += n
    return out


def largest_sub_group(partition_sizes: Iterable[int], sub_group_size: int) -> int:
    """Elements of the largest optimizer sub-group: a rank's parameter partitions, in order, cut
    where a group reaches sub_group_size (stage3.py, `_create_fp16_sub_groups`)."""
    sizes = list(partition_sizes)
    if not sub_group_size or sub_group_size >= sum(sizes):
        return sum(sizes)
    largest = current = 0
    for n in sizes:
        current += n
        if current >= sub_group_size:
            largest, current = max(largest, current), 0
    return max(largest, current)


def held_bytes(held: Zero3Held, p: int, world_size: int, offload: str, trained: int) -> dict[str, float]:
    """Bytes per rank of what ZeRO-3 holds beside its states, by part: `p` bytes per 16-bit (or
    fp32) element; gathered copies only at 2+ ranks or where parameters live on the host; the
    gradient partition on the device only without optimizer offload."""
    copies = world_size > 1 or offload != "none"
    return {
        "gradient partition": 0.0 if offload != "none" else held.grad_bytes * trained / world_size,
        "reduce bucket": float(p * held.reduce_bucket),
        "gathered parameters": float(p * held.gathered) if copies else 0.0,
    }


def step_bytes(held: Zero3Held, p: int) -> float:
    """What the optimizer step allocates per rank beyond the states: the largest sub-group's
    flattened gradients and their fp32 copy (module docstring)."""
    return (p + (4 if p != 4 else 0)) * held.sub_group
