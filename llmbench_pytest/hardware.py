"""What this process can train on. Imports torch, lazily: the plugin calls it only when a
benchmark is collected, never at start-up."""

from __future__ import annotations

import functools
from dataclasses import dataclass

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


@functools.cache
def detect(preference: str = "auto", local_rank: int = 0) -> Hardware:
    import torch

    available = torch.cuda.is_available()
    if preference == "cuda" and not available:
        raise SpecError(
            "--llmbench-device=cuda but no GPU is visible (torch.cuda.is_available() is False); "
            "use --llmbench-device=cpu or auto."
        )
    if preference == "cpu" or not available:
        return Hardware(device="cpu")
    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(local_rank % count)
    return Hardware(
        device="cuda",
        gpu_name=props.name,
        gpu_count=count,
        device_gib=props.total_memory / 2**30,
        bf16=torch.cuda.is_bf16_supported(),
    )
