"""The fixed cost of one NCCL collective across nodes, as NCCL's own tuner models it. Standard
library only.

NCCL picks an algorithm per collective from a cost model of latency plus size over bandwidth
(src/graph/tuning.cc, ncclTopoTuneModel; NVIDIA/nccl at 5067397, 2026-06). All-gather and
reduce-scatter run as rings (the tree is for all-reduce; NVIDIA/nccl#1413 and #1594), and a ring's
latency grows with its steps: n - 1 of them for an all-gather or a reduce-scatter over n ranks,
2(n - 1) for a ring all-reduce, of which the steps that cross a node boundary (nodes - 1, twice
for an all-reduce) pay the network's latency and the rest NVLink's. A tree all-reduce pays the
network twice per level of a binary tree over the nodes (log2 nodes levels) and NVLink twice per
GPU of a node:

    ring:  base + (steps - inter_steps) x max(nvlink, 3 x net_overhead) + inter_steps x net
    tree:  base + 2 x ((gpus_per_node - 1) x nvlink_tree + floor(log2 nodes) x net)

with the Simple protocol's constants (large messages; microseconds): base 8.4, NVLink 3.4 a ring
step and 4.0 a tree step, NCCL's net overhead 1 us on Intel hosts and 2 on AMD (x3 for Simple: 3.4
a step on Intel, 6 on AMD, which the upper end of an interval takes), and the network's per-step
latency `net` (NCCL's constant 14 us for Simple).
Inside one node the probe's measured latency stands instead (plan/network.py).
"""

from __future__ import annotations

import math

BASE_US = 8.4
"""baseLatencies, Simple protocol, ring and tree."""
NVLINK_RING_US = 3.4
NVLINK_TREE_US = 4.0
AMD_RING_STEP_US = 2.0 * 3
"""getNetOverhead on an AMD host (2 us, times 3 for Simple): a ring step inside a node when the ring
crosses nodes; on Intel hosts (1 us x 3) NVLink's 3.4 is the larger."""
NET_US = 14.0
"""hwLatencies[NET], Simple protocol, ring and tree: the default per-step network latency."""
NET_US_RANGE = (4.0, 28.0)
"""The range an interval spans for the network's per-step latency: NCCL's LL128 constant for the
network (4.0 us, the protocol it picks for mid-size messages) up to twice the Simple one (a NIC that
reports latency of its own gets it added twice for Simple, tuning.cc; deeper switch tiers)."""


def inter_node_steps(kind: str, nodes: int) -> int:
    """Ring steps that cross a node boundary."""
    if nodes <= 1:
        return 0
    return 2 * (nodes - 1) if kind == "all_reduce" else nodes - 1


def ring_us(
    kind: str, ranks: int, nodes: int, net_us: float = NET_US, step_us: float = NVLINK_RING_US
) -> float:
    """A ring collective's latency over `ranks` GPUs on `nodes` nodes (module docstring); `step_us`
    a step inside a node."""
    steps = 2 * (ranks - 1) if kind == "all_reduce" else ranks - 1
    inter = inter_node_steps(kind, nodes)
    return BASE_US + (steps - inter) * step_us + inter * net_us


def tree_us(ranks: int, nodes: int, net_us: float = NET_US) -> float:
    """A tree all-reduce's latency (module docstring)."""
    per_node = max(1, ranks // max(1, nodes))
    levels = math.floor(math.log2(nodes)) if nodes > 1 else 0
    return BASE_US + 2 * ((per_node - 1) * NVLINK_TREE_US + levels * net_us)


def latency_us(
    kind: str, ranks: int, nodes: int, net_us: float = NET_US, step_us: float = NVLINK_RING_US
) -> float:
    """The collective's fixed cost as NCCL runs it across nodes: a tree for all-reduce, rings for
    the rest."""
    if ranks < 2:
        return 0.0
    if kind == "all_reduce":
        return tree_us(ranks, nodes, net_us)
    return ring_us(kind, ranks, nodes, net_us, step_us)
