"""The links a scale prediction times collectives over: the one measured between the GPUs of a node
(the link probe, worker/link_probe.py) and, beyond the node, a network the user names. Standard
library only.

Inside a node a collective of S bytes over n ranks takes S x bus factor / busbw(S), with busbw the
probe's at that size (analysis/collectives.busbw_at) and never less than the probe's latency: the
probe measured it at its own world size, and an NVLink switch carries the same busbw to every GPU
of the node, which is assumed for more GPUs of the node than the probe ran on. Across nodes each
of NCCL's rings (one per channel, the channels spread over the node's NICs) enters and leaves a
node once, so a node's NICs together carry what one GPU's links carry: the bus bandwidth is the
smaller of the node's link and the node's NICs together (the GPUs of a node times each GPU's
share), as nccl-tests measures it over several nodes (86 GB/s of busbw between two 8x A100 nodes
with four 200 Gbit/s NICs each, 100 GB/s a node: NVIDIA/nccl#1048; 84.8 GB/s over three:
NVIDIA/nccl-tests#119). The collective's fixed cost is NCCL's own model of it
(plan/nccl_latency.py): rings for all-gather and reduce-scatter, whose latency grows with the
ranks, a tree for all-reduce. The NIC's figures are assumed, never
measured: every figure beyond the node says so, and an interval spans their published ranges
(`corner`).

Compute beside a collective hides the share of it the probe measured (worker/overlap_probe.py)
at the node's link speed; a kind the probe has no share for takes the other kinds' mean, or
HIDDEN_ASSUMED.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..analysis.collectives import bus_factor, busbw_at, hidden_share, peak_busbw
from . import nccl_latency

if TYPE_CHECKING:
    from collections.abc import Iterable

NETWORKS = {"100G": 100.0, "200G": 200.0, "400G": 400.0, "800G": 800.0}
"""Per-GPU NIC line rates (Gbit/s) for InfiniBand/RoCE fabrics, one NIC per GPU (as on DGX H100:
eight 400G ConnectX-7). Assumed figures: a user's own (--network-gbps, --network-latency-us)
replace them."""
NIC_EFFICIENCY = 0.90
"""The share of a NIC's line rate NCCL's bus bandwidth reaches across nodes (assumed), the middle of
NIC_EFFICIENCY_RANGE."""
NIC_EFFICIENCY_RANGE = (0.85, 0.96)
"""Published: 46-48 GB/s of busbw per 400 Gbit/s NDR NIC (NVIDIA, NVIDIA/nccl-tests#290); 84.8 GB/s
average and 96 GB/s peak across three 8x A100 nodes with four 200 Gbit/s NICs each
(NVIDIA/nccl-tests#119); 86 of 96-100 GB/s on two such nodes (NVIDIA/nccl#1048)."""
MAX_NIC_GBYTES = 200.0
"""GB/s of bus bandwidth per GPU no network gives: two 800 Gbit/s ports a GPU at line rate."""
HIDDEN_ASSUMED = 0.5
"""The share of a collective compute beside it hides where no probe measured one: the kept probes
on 2x and 4x H100 and H200 measured 0.40-0.57 (docs/results/2026-11-27-*); an interval spans none
to whole."""


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
    """Bus bandwidth across nodes of each GPU's share of its node's NICs, GB/s (assumed); the node's
    NICs together give gpus_per_node times it. None: no prediction beyond the node."""
    network_latency_us: float = nccl_latency.NET_US
    """The network's latency a ring step (NCCL's `net`, plan/nccl_latency.py)."""
    network_name: str | None = None
    nic_efficiency: float | None = None
    """The share of the NIC's line rate in network_gbytes, where it came from a NIC's rate (an
    interval spans NIC_EFFICIENCY_RANGE); None where the bus bandwidth was given directly."""
    ring_step_us: float = nccl_latency.NVLINK_RING_US
    """A ring step inside a node, when the ring crosses nodes."""
    hidden_override: float | None = None
    """An interval's end: the share compute hides of every collective beside it across nodes, and of
    a kind the probe has no share for (`corner`)."""

    @property
    def measured_world_size(self) -> int:
        return int(self.sweep.get("world_size") or 2)

    def latency_s(self, kind: str) -> float:
        table = self.sweep.get(kind) or self.sweep.get("all_reduce") or {}
        return float(table.get("latency_us") or 0.0) * 1e-6

    def measured_overlap(self) -> dict[str, float]:
        """The probe's hidden share per collective kind, where its timings allow one: a share the
        result recorded as 100% from a train faster beside compute than alone (before the probe
        recorded that as noise) is left out, recomputed from its timings."""
        shares = {}
        for kind, recorded in self._recorded_overlap().items():
            times = [recorded.get(k) for k in ("compute_ms", "comm_ms", "both_ms")]
            share = recorded["hidden_share"]
            if all(t is not None for t in times):
                share = hidden_share(*map(float, times))
            if share is not None:
                shares[kind] = min(1.0, float(share))
        return shares

    def _recorded_overlap(self) -> dict[str, dict[str, Any]]:
        """The probe's overlap records that carry a share."""
        overlap = self.sweep.get("overlap") or {}
        return {k: v for k, v in overlap.items() if isinstance(v, dict) and v.get("hidden_share") is not None}

    def hidden_share(self, kind: str, n: int = 2) -> float:
        """The share of a `kind` collective's time that compute beside it hides: the probe's
        (worker/overlap_probe.py), else the mean of its other kinds', else HIDDEN_ASSUMED; an
        interval's end (hidden_override) replaces all but a measured share inside the node."""
        measured = self.measured_overlap()
        if self.hidden_override is not None and (n > self.gpus_per_node or kind not in measured):
            return self.hidden_override
        if kind in measured:
            return measured[kind]
        return sum(measured.values()) / len(measured) if measured else HIDDEN_ASSUMED

    def overlap_text(self) -> str:
        """What the predictions assume of collectives beside compute, and whence."""
        shares = self.measured_overlap()
        noise = [k for k in self._recorded_overlap() if k not in shares]
        if not shares:
            return (
                f"collectives beside compute: compute hides {HIDDEN_ASSUMED:.0%} of each (assumed; this link "
                "probe measured no overlap; an interval spans none to whole)"
            )
        parts = ", ".join(f"{v:.0%} of {'an' if k[0] in 'aeiou' else 'a'} {k}" for k, v in shares.items())
        text = f"collectives beside compute: compute hides {parts} (measured by the link probe)"
        if noise:
            text += f"; {', '.join(noise)} ran faster beside compute than alone: noise, not counted"
        return text

    def in_node_seconds(self, kind: str, size_bytes: float, n: int) -> float:
        """One collective of nccl-tests' size S over n ranks at the node's link (module docstring)."""
        factor = bus_factor(kind, n)
        if factor == 0 or size_bytes <= 0:
            return 0.0
        probed = kind if self.sweep.get(kind) else "all_reduce"
        intra = busbw_at(self.sweep, probed, size_bytes) or peak_busbw(self.sweep)
        if not intra:
            raise ValueError("the link probe recorded no bus bandwidth")
        return max(self.latency_s(probed), size_bytes * factor / (intra * 1e9))

    def seconds(self, kind: str, size_bytes: float, n: int) -> float:
        """One collective of nccl-tests' size S over n ranks (module docstring)."""
        inside = self.in_node_seconds(kind, size_bytes, n)
        if n <= self.gpus_per_node or inside == 0.0:
            return inside
        if self.network_gbytes is None:
            raise ValueError(f"{n} GPUs span nodes of {self.gpus_per_node}: name the network (--network)")
        probed = kind if self.sweep.get(kind) else "all_reduce"
        intra = busbw_at(self.sweep, probed, size_bytes) or peak_busbw(self.sweep) or self.network_gbytes
        nics = self.network_gbytes * self.gpus_per_node  # the node's NICs together (module docstring)
        across = size_bytes * bus_factor(kind, n) / (min(intra, nics) * 1e9)
        nodes = math.ceil(n / self.gpus_per_node)
        fixed = nccl_latency.latency_us(kind, n, nodes, self.network_latency_us, self.ring_step_us) * 1e-6
        return max(inside, across + fixed)

    def corner(self, slow: bool) -> Fabric:
        """The fabric at one end of an interval's assumptions: compute hiding none (slow) or all
        (fast) of a collective beside it across nodes and where the probe measured no share; the
        network's latency and, for a NIC's rate, its efficiency at the ends of their published
        ranges (nccl_latency.NET_US_RANGE, NIC_EFFICIENCY_RANGE); an AMD host's ring step (slow)."""
        gbytes = self.network_gbytes
        if gbytes is not None and self.nic_efficiency:
            gbytes *= NIC_EFFICIENCY_RANGE[0 if slow else 1] / self.nic_efficiency
        return replace(
            self,
            network_gbytes=gbytes,
            network_latency_us=max(self.network_latency_us, nccl_latency.NET_US_RANGE[1])
            if slow
            else min(self.network_latency_us, nccl_latency.NET_US_RANGE[0]),
            ring_step_us=nccl_latency.AMD_RING_STEP_US if slow else nccl_latency.NVLINK_RING_US,
            hidden_override=0.0 if slow else 1.0,
        )


def network(
    name: str | None, gbps: float | None, latency_us: float | None
) -> tuple[float | None, float, str | None]:
    """(GB/s of busbw per GPU, latency us a ring step across nodes, a name) from a preset ("400G",
    "2x200G") or figures given directly; (None, NCCL's 14 us, None) when neither is given. Raises
    ValueError naming the fix."""
    if latency_us is not None and not 0 < latency_us <= 1000:
        raise ValueError(
            f"--network-latency-us {latency_us:g}: give the network's latency a ring step in microseconds, "
            f"above 0 and at most 1000 (NCCL's own figure is {nccl_latency.NET_US:g})"
        )
    latency = latency_us if latency_us is not None else nccl_latency.NET_US
    if gbps is not None:
        if not 0 < gbps <= MAX_NIC_GBYTES:
            raise ValueError(
                f"--network-gbps {gbps:g}: it is GB/s (gigabytes) of bus bandwidth a GPU's share of its "
                f"node's NICs gives, above 0 and at most {MAX_NIC_GBYTES:g} (two 800 Gbit/s NICs a GPU); "
                "for a NIC's rate in Gbit/s give --network 400G (45 GB/s of busbw)"
            )
        return gbps, latency, f"{gbps:g} GB/s of busbw per GPU (given)"
    if name is None:
        return None, latency, None
    m = re.fullmatch(r"(?:(\d+)X)?(\d+)G", name.strip().upper())
    if not m or f"{m.group(2)}G" not in NETWORKS:
        known = ", ".join(NETWORKS)
        raise ValueError(
            f"--network {name!r}: name a NIC rate per GPU ({known}, or 2x400G for two NICs), or "
            "give --network-gbps"
        )
    nics = int(m.group(1) or 1)
    if not 1 <= nics <= 2:
        raise ValueError(f"--network {name!r}: one or two NICs a GPU (2x400G); got {nics}")
    gbytes = nics * NETWORKS[f"{m.group(2)}G"] / 8 * NIC_EFFICIENCY
    return gbytes, latency, f"{name} per GPU ({gbytes:.0f} GB/s of busbw assumed)"


def nic_efficiency(name: str | None, gbps: float | None) -> float | None:
    """The efficiency `network` applied: NIC_EFFICIENCY for a named NIC rate, None for a bus
    bandwidth given directly."""
    return NIC_EFFICIENCY if name is not None and gbps is None else None
