"""The collectives a profiled step ran, read from a torch.profiler Chrome trace, and nccl-tests'
bandwidth arithmetic. Standard library only (a trace is JSON).

nccl-tests (doc/PERFORMANCE.md) names two bandwidths for a collective of S bytes that took t
seconds over n ranks: algbw = S / t, and busbw = algbw x factor, where the factor makes busbw
comparable with the hardware's link speed whatever the collective:

    all_reduce  2(n-1)/n      S = the buffer each rank reduces
    all_gather  (n-1)/n       S = the gathered output (n x each rank's part)
    reduce_scatter (n-1)/n    S = the input each rank reduces (n x each rank's result)
    all_to_all  (n-1)/n       S = each rank's buffer
    broadcast, reduce, send/recv  1

So S x factor is the volume every rank's links carry ("bus bytes"): what llmbench divides by the
time in collectives to give a strategy's achieved bus GB/s, comparable with the link probe's.

Where the sizes come from:
- GPU (NCCL): each collective's kernel, whose name says its kind (ncclDevKernel_AllGather_...), and
  the metadata torch records for it ("In msg nelems", "Out msg nelems", "dtype", "Group size": the
  `record_param_comms` operator, whose fields Kineto also copies onto the kernel). The bytes are
  what ran: LoRA's adapters, frozen layers left out, buckets as the strategy filled them.
- CPU (gloo): the `gloo:<kind>` annotations of gloo's threads, with their input's shape and dtype
  (recorded with record_shapes=True). gloo has no reduce-scatter of its own: torch runs one as an
  all-reduce, and that is what is counted.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv")

_ELEMENT_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4, "double": 8, "float64": 8, "bfloat16": 2, "c10::bfloat16": 2,
    "half": 2, "float16": 2, "c10::half": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "char": 1,
    "int8": 1, "byte": 1, "uint8": 1, "bool": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}  # fmt: skip
"""Bytes per element by the dtype names the profiler writes (c10's and NCCL metadata's)."""


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw / algbw for `kind` over `n` ranks (module docstring)."""
    if n < 2:
        return 0.0  # one rank moves nothing over a link
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def kind_of(name: str) -> str | None:
    """The collective a kernel, an annotation or a recorded collective name stands for."""
    low = name.lower().replace("_", "").replace(":", "")
    for key, kind in (
        ("allreduce", "all_reduce"),
        ("reducescatter", "reduce_scatter"),
        ("allgather", "all_gather"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("sendrecv", "send_recv"),
        ("send", "send_recv"),
        ("recv", "send_recv"),
        ("reduce", "reduce"),
    ):
        if key in low:
            return kind
    return None


def element_bytes(dtype: str) -> int | None:
    return _ELEMENT_BYTES.get(dtype.strip().lower())


@dataclass(frozen=True)
class Collective:
    """One collective as it ran: its kind, S (nccl-tests' size, bytes), its group's size, dtype,
    and the seconds its kernel ran (None where the trace has no device time for it: gloo)."""

    kind: str
    size_bytes: float | None
    """None where the trace recorded no size for it."""
    group_size: int
    dtype: str
    seconds: float | None = None

    @property
    def bus_bytes(self) -> float | None:
        return None if self.size_bytes is None else self.size_bytes * bus_factor(self.kind, self.group_size)


def _args(e: dict[str, Any]) -> dict[str, Any]:
    args = e.get("args")
    return args if isinstance(args, dict) else {}


def _size(kind: str, in_elems: float, out_elems: float, elem: int, n: int) -> float:
    """nccl-tests' S from a collective's input and output element counts (module docstring)."""
    if kind == "all_gather":
        return max(out_elems, in_elems * n) * elem
    if kind == "reduce_scatter":
        return max(in_elems, out_elems * n) * elem
    return max(in_elems, out_elems) * elem


def _from_metadata(
    kind: str, args: dict[str, Any], world_size: int, seconds: float | None
) -> Collective | None:
    """A collective from torch's recorded metadata (NCCL's kernels and record_param_comms)."""
    if "In msg nelems" not in args and "Out msg nelems" not in args:
        return None
    elem = element_bytes(str(args.get("dtype", ""))) or 0
    n = int(args.get("Group size") or world_size or 1)
    in_e, out_e = float(args.get("In msg nelems") or 0), float(args.get("Out msg nelems") or 0)
    return Collective(kind, _size(kind, in_e, out_e, elem, n), n, str(args.get("dtype", "")), seconds)


def _from_shapes(kind: str, args: dict[str, Any], world_size: int) -> Collective | None:
    """A gloo collective from its annotation's recorded input shape and dtype."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    if not dims or not types:
        return None
    count = 1.0
    for d in dims[0] if isinstance(dims[0], list) else []:
        count *= float(d)
    elem = element_bytes(str(types[0])) or 0
    out = count * world_size if kind == "all_gather" else count
    return Collective(kind, _size(kind, count, out, elem, world_size), world_size, str(types[0]))


def collectives_in(events: Iterable[dict[str, Any]], device: str, world_size: int) -> list[Collective]:
    """Every collective of the trace's complete events, in the order they started. On a GPU the
    NCCL kernels (their own metadata, else the record_param_comms operators in the same order);
    on a CPU gloo's annotations."""
    events = sorted((e for e in events if e.get("ph") == "X" and "dur" in e), key=lambda e: float(e["ts"]))
    if device != "cuda":
        out = []
        for e in events:
            name = str(e.get("name", ""))
            if e.get("cat") == "user_annotation" and name.startswith("gloo:"):
                kind = kind_of(name[5:])
                found = _from_shapes(kind, _args(e), world_size) if kind else None
                if found is not None:
                    out.append(found)
        return out
    kernels = [e for e in events if e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()]
    recorded = [
        e
        for e in events
        if e.get("cat") == "cpu_op" and e.get("name") == "record_param_comms"
        and kind_of(str(_args(e).get("Collective name", ""))) is not None
    ]  # fmt: skip
    timed = []
    for k in kernels:
        kind = kind_of(str(k.get("name", ""))) or kind_of(str(_args(k).get("Collective name", "")))
        if kind is not None:
            seconds = float(k["dur"]) * 1e-6
            timed.append(
                _from_metadata(kind, _args(k), world_size, seconds)
                or Collective(kind, None, world_size, "", seconds)
            )
    if all(c.size_bytes is not None for c in timed):
        return timed
    # the kernels carry no sizes: the host's records of the same collectives have them, in order
    sized = [
        c
        for e in recorded
        if (
            c := _from_metadata(
                kind_of(str(_args(e).get("Collective name"))) or "", _args(e), world_size, None
            )
        )
    ]
    if len(sized) == len(timed):
        return [dataclasses.replace(c, seconds=t.seconds) for c, t in zip(sized, timed, strict=True)]
    return sized or timed


def schedule(collectives: list[Collective], steps: int) -> list[dict[str, Any]]:
    """Per step, by kind, dtype and size: how many, S, bus bytes and kernel seconds; largest volume
    first. The collective schedule a scale prediction starts from."""
    groups: dict[tuple[str, str, float | None, int], list[Collective]] = {}
    for c in collectives:
        groups.setdefault((c.kind, c.dtype, c.size_bytes, c.group_size), []).append(c)
    n = max(1, steps)
    rows = []
    for (kind, dtype, size, group), items in groups.items():
        timed = [c.seconds for c in items if c.seconds is not None]
        rows.append(
            {
                "kind": kind,
                "dtype": dtype,
                "size_bytes": size,
                "group_size": group,
                "count_per_step": len(items) / n,
                "bus_bytes_per_step": None if size is None else sum(c.bus_bytes or 0.0 for c in items) / n,
                "kernel_sec_per_step": sum(timed) / n if timed else None,
            }
        )
    return sorted(rows, key=lambda r: -(r["bus_bytes_per_step"] or 0.0))


def busbw_at(link: dict[str, Any] | None, kind: str, size_bytes: float) -> float | None:
    """The link probe's busbw (GB/s) for `kind` at a message of `size_bytes`, interpolated between
    the swept sizes on a log scale (the nearest end outside them); None without a sweep of that
    kind (worker/link_probe.py writes `link`)."""
    rows = ((link or {}).get(kind) or {}).get("sizes") or []
    points = sorted((float(r["bytes"]), float(r["busbw_gbps"])) for r in rows if r.get("busbw_gbps"))
    if not points or size_bytes <= 0:
        return None
    if size_bytes <= points[0][0]:
        return points[0][1]
    for (s0, b0), (s1, b1) in itertools.pairwise(points):
        if size_bytes <= s1:
            w = (math.log(size_bytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return b0 + w * (b1 - b0)
    return points[-1][1]


def hidden_share(t_compute: float, t_comm: float, t_both: float) -> float | None:
    """The share of the shorter of two trains (multiplies, collectives) that running them together
    hid: (t_compute + t_comm - t_both) / min(t_compute, t_comm); 1 when together they took the
    longer one's time, 0 when they took their sum (below 0, slower than one after the other, is
    clipped to 0). None where the timings allow no share: together faster than the longer train
    alone (a share above 1, which no overlap gives: the timings' noise is larger than what they
    measure), or a train that took no time."""
    shorter, longer = sorted((t_compute, t_comm))
    if shorter <= 0 or t_both < longer:
        return None
    return max(0.0, (t_compute + t_comm - t_both) / shorter)


def peak_busbw(link: dict[str, Any] | None) -> float | None:
    """The highest busbw the link probe measured, over its collectives and sizes."""
    peaks = [t.get("peak_busbw_gbps") for t in (link or {}).values() if isinstance(t, dict)]
    return max((p for p in peaks if p), default=None)
