"""The links a scale prediction times collectives over: the one measured between the GPUs of a node
(the link probe, worker/link_probe.py) and, beyond the node, a network the user names. Standard
library only.

Inside a node a collective of S bytes over n ranks takes S x bus factor / busbw(S), with busbw the
probe's at that size (analysis/collectives.busbw_at) and never less than the probe's latency: the
probe measured it at its own world size, and an NVLink switch carries the same busbw to every GPU
of the node, which is assumed for more GPUs of the node than the probe ran on. Across nodes NCCL's
collectives are hierarchical: the data crosses the network once per GPU, each GPU through its own
NIC on a rail-optimised fabric, so the bus bandwidth is the smaller of the node's and the NIC's,
and each of the log2(nodes) levels of NCCL's tree adds the network's latency twice (reduce and
broadcast; rings add it per step, trees per level). The NIC's figure is assumed, never measured:
every figure beyond the node says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.collectives import bus_factor, busbw_at, peak_busbw

if TYPE_CHECKING:
    from collections.abc import Iterable

NETWORKS = {
    "100G": (100.0, 5.0),
    "200G": (200.0, 5.0),
    "400G": (400.0, 5.0),
    "800G": (800.0, 5.0),
}
"""Per-GPU NIC line rates (Gbit/s) and a per-hop latency (us) for InfiniBand/RoCE fabrics, one NIC
per GPU (as on DGX H100: eight 400G ConnectX-7). Assumed figures: a user's own (--network-gbps,
--network-latency-us) replace them."""
NIC_EFFICIENCY = 0.9
"""The share of a NIC's line rate NCCL's bus bandwidth reaches across nodes (assumed: nccl-tests
across 400G InfiniBand nodes reports about 45-48 GB/s of busbw against 50 GB/s of line rate)."""


def widest_sweep(results: Iterable[dict[str, Any]], device: str | None = None) -> dict[str, Any] | None:
    """The link probe's sweep at the largest world size among `results` (result.json documents),
    only those run on `device` where given; None where none recorded one."""
    sweeps = [
        r["link"]
        for r in results
        if isinstance(r.get("link"), dict)
        and r["link"].get("world_size")
        and (device is None or r.get("device") == device)
    ]
    return max(sweeps, key=lambda s: int(s["world_size"]), default=None)


@dataclass(frozen=True)
class Fabric:
    """The measured link inside a node and the assumed network between nodes."""

    sweep: dict[str, Any]
    """The link probe's result (result.json's `link`)."""
    gpus_per_node: int
    network_gbytes: float | None = None
    """Bus bandwidth across nodes, GB/s per GPU (assumed); None: no prediction beyond the node."""
    network_latency_us: float = 5.0
    network_name: str | None = None

    @property
    def measured_world_size(self) -> int:
        return int(self.sweep.get("world_size") or 2)

    def latency_s(self, kind: str) -> float:
        table = self.sweep.get(kind) or self.sweep.get("all_reduce") or {}
        return float(table.get("latency_us") or 0.0) * 1e-6

    def hidden_share(self, kind: str) -> float:
        """The share of a `kind` collective's time that compute beside it hides, as the probe
        measured it (worker/overlap_probe.py); 1 (all of it) for a sweep without that figure."""
        measured = ((self.sweep.get("overlap") or {}).get(kind) or {}).get("hidden_share")
        return 1.0 if measured is None else float(measured)

    def measured_overlap(self) -> dict[str, float]:
        """The probe's hidden share per collective kind, where it recorded one."""
        shares = {k: (v or {}).get("hidden_share") for k, v in (self.sweep.get("overlap") or {}).items()}
        return {k: float(v) for k, v in shares.items() if v is not None}

    def overlap_text(self) -> str:
        """What the predictions assume of collectives beside compute, and whence."""
        shares = self.measured_overlap()
        if not shares:
            return "collectives beside compute: hidden whole (assumed; this link probe measured no overlap)"
        parts = ", ".join(f"{v:.0%} of {'an' if k[0] in 'aeiou' else 'a'} {k}" for k, v in shares.items())
        return f"collectives beside compute: compute hides {parts} (measured by the link probe)"

    def seconds(self, kind: str, size_bytes: float, n: int) -> float:
        """One collective of nccl-tests' size S over n ranks (module docstring)."""
        factor = bus_factor(kind, n)
        if factor == 0 or size_bytes <= 0:
            return 0.0
        probed = kind if self.sweep.get(kind) else "all_reduce"
        intra = busbw_at(self.sweep, probed, size_bytes) or peak_busbw(self.sweep)
        if not intra:
            raise ValueError("the link probe recorded no bus bandwidth")
        seconds = max(self.latency_s(probed), size_bytes * factor / (intra * 1e9))
        if n <= self.gpus_per_node:
            return seconds
        if self.network_gbytes is None:
            raise ValueError(f"{n} GPUs span nodes of {self.gpus_per_node}: name the network (--network)")
        across = size_bytes * factor / (min(intra, self.network_gbytes) * 1e9)
        levels = math.ceil(math.log2(math.ceil(n / self.gpus_per_node)))
        return max(seconds, across) + 2 * levels * self.network_latency_us * 1e-6


def network(
    name: str | None, gbps: float | None, latency_us: float | None
) -> tuple[float | None, float, str | None]:
    """(GB/s of busbw per GPU, latency us, a name) from a preset ("400G", "2x200G") or figures
    given directly; (None, 5.0, None) when neither is given. Raises ValueError naming the fix."""
    if gbps is not None:
        if gbps <= 0:
            raise ValueError(f"--network-gbps must be above 0; got {gbps:g}")
        return gbps, latency_us if latency_us is not None else 5.0, f"{gbps:g} GB/s per GPU (given)"
    if name is None:
        return None, latency_us if latency_us is not None else 5.0, None
    m = re.fullmatch(r"(?:(\d+)X)?(\d+)G", name.strip().upper())
    if not m or f"{m.group(2)}G" not in NETWORKS:
        known = ", ".join(NETWORKS)
        raise ValueError(
            f"--network {name!r}: name a NIC rate per GPU ({known}, or 2x400G for two NICs), or "
            "give --network-gbps"
        )
    line, hop = NETWORKS[f"{m.group(2)}G"]
    nics = int(m.group(1) or 1)
    gbytes = nics * line / 8 * NIC_EFFICIENCY
    return (
        gbytes,
        latency_us if latency_us is not None else hop,
        f"{name} per GPU ({gbytes:.0f} GB/s of busbw assumed)",
    )
