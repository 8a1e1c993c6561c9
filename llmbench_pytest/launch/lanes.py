"""Lanes: which configurations may run side by side on a node, and on which GPUs and cores.

Standard library only. On a node of G GPUs a world size w leaves G // w disjoint slices of w GPUs
("lanes"): while one configuration of that world size trains on GPUs 0..w-1, the next ones can
train on the others instead of leaving them idle. Each lane's ranks see only their own GPUs
(CUDA_VISIBLE_DEVICES) and bind to their own slice of the host's cores, the same share a rank
gets when the node runs one configuration of G ranks (cores / ranks on the node,
config/host_share.py).

Not every configuration may share the node. What a lane does not divide (the host's memory
bandwidth, PCIe, the disk) would move the figures of a configuration that leans on it, so those
run alone, with the node's every core, as they do without lanes:

- CPU optimizer offload (ZeRO-Offload, ZeRO-Infinity): DeepSpeed's CPU Adam streams every
  parameter's optimizer state through host memory each step and moves gradients and parameters
  over PCIe (4x H200: zero2_offload 3.6% slower beside three other configurations under
  pytest-xdist, against at most 1.7% for the others, 2026-11-27);
- NVMe offload: the drive is the node's;
- data read from disk: the page cache and the drive are the node's (the encoder-decoder's disk
  epochs already vary most of all runs, 15.5% at 4 GPUs on 4x H200).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import host_share

if TYPE_CHECKING:
    from ..config.spec import RunSpec

LANE_ENV = "LLMBENCH_LANE"
"""Set in a lane's ranks ("2/4"): the link probe keeps no sweep it took while other lanes trained."""
AUTO = "auto"
OFF = "no"


def alone_reason(spec: RunSpec) -> str | None:
    """Why `spec` must have the node to itself (None: it may run beside others)."""
    if spec.offload == "cpu":
        return "CPU offload: its optimizer runs on the host's cores and memory, over PCIe"
    if spec.offload == "nvme":
        return "NVMe offload: the drive is the node's"
    if spec.data == "disk":
        return "reads its batches from disk: the page cache and the drive are the node's"
    return None


def lane_count(world_size: int, device: str, gpus: int, setting: str) -> int:
    """How many configurations of `world_size` may train at once: auto, GPUs // world size on a
    GPU node (1 on a CPU, whose ranks' compute is the host itself); no, 1; N, at most N (on a CPU,
    N: a smoke test of the scheduling, not a measurement)."""
    if setting == OFF or world_size < 1:
        return 1
    if device != "cuda":
        return int(setting) if setting != AUTO else 1
    fits = max(1, gpus // world_size)
    return fits if setting == AUTO else max(1, min(fits, int(setting)))


@dataclass(frozen=True)
class Lane:
    """One slice of the node: `gpus` (as CUDA_VISIBLE_DEVICES names them; none on a CPU) and the
    host `cores` its ranks divide (none: not bound, as on a CPU)."""

    index: int
    count: int
    world_size: int
    gpus: tuple[str, ...]
    cores: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"lane {self.index + 1}/{self.count}"

    def env(self, environ: dict[str, str], device: str) -> dict[str, str]:
        """What this lane's torchrun group adds to its environment: its GPUs, and each rank's share
        of the lane's cores (unless the user set OMP_NUM_THREADS, which host_share respects)."""
        out = dict(host_share.group_env(environ, self.world_size, device, cores=list(self.cores) or None))
        if self.gpus:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        out[LANE_ENV] = f"{self.index + 1}/{self.count}"
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "lane": self.index + 1,
            "lanes": self.count,
            "gpus": list(self.gpus),
            "cores": host_share.ranges(list(self.cores)) if self.cores else None,
        }


def lanes(world_size: int, count: int, gpu_ids: list[str], cores: list[int]) -> list[Lane]:
    """`count` lanes of `world_size` GPUs each from `gpu_ids` (in order), each with its ranks' share
    of `cores`: a rank's share is what it gets when one configuration uses every GPU listed (cores
    / GPUs), whatever the number of lanes, each lane taking its ranks' contiguous slices. With no
    GPUs (a CPU) the lanes are not bound."""
    ranks = len(gpu_ids)
    out = []
    for i in range(count):
        gpus = tuple(gpu_ids[i * world_size : (i + 1) * world_size]) if gpu_ids else ()
        mine: list[int] = []
        if gpu_ids:
            for r in range(i * world_size, (i + 1) * world_size):
                mine += host_share.slice_for(cores, ranks, r)
        out.append(Lane(i, count, world_size, gpus, tuple(dict.fromkeys(mine))))
    return out
