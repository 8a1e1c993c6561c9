"""What this machine can train on, asked once when a benchmark is collected (never at start-up).

NVML (nvidia-ml-py) answers without creating a CUDA context, so a launcher-mode pytest process
holds no GPU memory while its torchrun groups measure theirs. Without NVML, torch answers.

Under pytest-xdist each worker owns a contiguous, disjoint slice of the node's devices
(`share_node`): worker i of n gets devices // n GPUs (its groups see only those, through
CUDA_VISIBLE_DEVICES) or, on CPU, cores // n cores (the worker and every rank it starts are
pinned to them). From then on `detect` answers with the worker's slice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from . import host_share
from .nvml import nvml_session, text
from .spec import SpecError


@dataclass(frozen=True)
class Hardware:
    device: str
    """cuda or cpu."""
    gpu_name: str | None = None
    gpu_count: int = 0
    device_gib: float | None = None
    """Memory of one GPU, in GiB."""
    bf16: bool = False
    cpu_cores: int = 1
    share: NodeShare | None = None
    """Under pytest-xdist: the slice of the node this worker owns (the counts above are the slice's)."""
    compute_capability: tuple[int, int] | None = None
    """(major, minor) of the first GPU: float8 matmuls need 8.9 or more."""

    @property
    def devices(self) -> int:
        """How many ranks this machine can run, one device (GPU or CPU core) each."""
        return self.gpu_count if self.device == "cuda" else self.cpu_cores


@dataclass(frozen=True)
class NodeShare:
    """The devices one pytest-xdist worker owns on a node that several workers share."""

    worker: str
    """The xdist worker id, e.g. gw1."""
    index: int
    workers: int
    device: str
    """cuda (GPUs) or cpu (cores)."""
    devices: tuple[str, ...]
    """The GPUs as CUDA_VISIBLE_DEVICES names them, or the CPU core numbers."""
    node_devices: int
    """How many of them the whole node has."""

    def to_dict(self) -> dict[str, object]:
        return {
            "worker": self.worker,
            "workers": self.workers,
            "device": self.device,
            "devices": list(self.devices),
            "node_devices": self.node_devices,
        }


_share: Hardware | None = None
"""This process's slice of the node, once share_node has claimed it (an xdist worker)."""


def visible_gpus(count: int) -> list[str]:
    """The first `count` GPUs as CUDA_VISIBLE_DEVICES names them (indices where it is unset)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip()][:count]
    return [str(i) for i in range(count)]


def share_node(worker: str, workers: int, preference: str = "auto") -> Hardware:
    """Claim worker `worker`'s (gw<i>) contiguous slice of this node's devices, for this process
    and every process it starts. With more workers than devices a worker may own none; the
    benchmarks then skip with the reason."""
    global _share
    node = detect(preference)
    digits = worker.removeprefix("gw")
    index = int(digits) % workers if digits.isdigit() else 0
    if node.device == "cuda":
        ids = visible_gpus(node.gpu_count)
    else:
        ids = [str(c) for c in sorted(os.sched_getaffinity(0))]
    per = len(ids) // workers
    mine = tuple(ids[index * per : (index + 1) * per])
    if node.device == "cuda":
        # set before torch touches CUDA here, and inherited by every torchrun group started
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
        # and the worker's share of the host's cores, which its ranks divide (config/host_share.py):
        # offload's CPU optimizer beside another worker's runs gets its own cores
        cores = host_share.slice_for(host_share.usable_cores(), workers, index)
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, cores)
    elif mine:
        os.sched_setaffinity(0, [int(c) for c in mine])  # children inherit the mask
    share = NodeShare(worker, index, workers, node.device, mine, len(ids))
    count = {"gpu_count": len(mine)} if node.device == "cuda" else {"cpu_cores": len(mine)}
    _share = dataclasses.replace(node, share=share, **count)
    detect.cache_clear()
    return _share


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _no_gpu_device_nodes() -> bool:
    """Linux shows every GPU torch could use as a device node (NVIDIA: /dev/nvidiaN, ROCm: /dev/kfd,
    WSL: /dev/dxg). With none, asking torch is not needed: importing it is 1.5 s of every session's
    start-up on a 2-core machine, in a process that otherwise never needs it."""
    dev = Path("/dev")
    if not (dev / "null").exists():
        return False  # no /dev to read: ask torch
    return not (any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists() or (dev / "dxg").exists())


def _from_nvml() -> Hardware | None:
    # respects CUDA_VISIBLE_DEVICES only when it lists indices; otherwise torch decides below
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
        return None
    try:
        with nvml_session() as nvml:
            indices = list(range(nvml.nvmlDeviceGetCount()))
            if visible is not None:
                indices = [int(v) for v in visible.split(",") if v.strip()]
                if not indices:
                    return None
            handle = nvml.nvmlDeviceGetHandleByIndex(indices[0])
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            return Hardware(
                device="cuda",
                gpu_name=text(nvml.nvmlDeviceGetName(handle)),
                gpu_count=len(indices),
                device_gib=nvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30,
                bf16=major >= 8,
                cpu_cores=_cpu_cores(),
                compute_capability=(int(major), int(minor)),
            )
    except Exception:  # NvmlUnavailable, or an NVML query this driver does not answer
        return None


@functools.cache
def detect(preference: str = "auto", local_rank: int = 0) -> Hardware:
    if _share is not None:
        return _share
    if preference == "cpu":
        return Hardware(device="cpu", cpu_cores=_cpu_cores())
    found = _from_nvml()
    if found is None and not _no_gpu_device_nodes():
        import torch

        if torch.cuda.is_available():
            count = torch.cuda.device_count()
            props = torch.cuda.get_device_properties(local_rank % count)
            found = Hardware(
                device="cuda",
                gpu_name=props.name,
                gpu_count=count,
                device_gib=props.total_memory / 2**30,
                bf16=props.major >= 8,
                cpu_cores=_cpu_cores(),
                compute_capability=(props.major, props.minor),
            )
    if found is None:
        if preference == "cuda":
            raise SpecError(
                "--llmbench-device=cuda but no GPU is visible; use --llmbench-device=cpu or auto."
            )
        return Hardware(device="cpu", cpu_cores=_cpu_cores())
    return found
