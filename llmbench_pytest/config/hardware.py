"""What this machine can train on, asked once when a benchmark is collected (never at start-up).

NVML (nvidia-ml-py) answers without creating a CUDA context, so a launcher-mode pytest process
holds no GPU memory while its torchrun groups measure theirs. Without NVML, torch answers.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

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
    compute_capability: tuple[int, int] | None = None
    """(major, minor) of the first GPU: float8 matmuls need 8.9 or more."""

    @property
    def devices(self) -> int:
        """How many ranks this machine can run, one device (GPU or CPU core) each."""
        return self.gpu_count if self.device == "cuda" else self.cpu_cores


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


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
    if preference == "cpu":
        return Hardware(device="cpu", cpu_cores=_cpu_cores())
    found = _from_nvml()
    if found is None:
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
