"""Will a run fit on a GPU: its predicted peak allocated (analysis/peak_model.py) against what the
GPU's memory leaves to PyTorch's caching allocator. Standard library only.

A run runs out of memory when the caching allocator cannot get a block from CUDA. It asks CUDA
for more only after handing back every cached block it holds free (it retries after
release_cached_blocks: the run's `alloc_retries`), so the cache that makes reserved memory 1.01-1.17
times the allocated at ease (RESERVED_OVER_ALLOCATED) is given back near the limit. What it cannot
give back is memory held outside it and the fragmentation of the blocks it holds:

- OUTSIDE_ALLOCATOR_GB: the CUDA context, the kernels loaded, NCCL's buffers;
- FRAGMENTATION: free space split inside blocks that are still partly in use.

So a run fits where allocated x (1 + FRAGMENTATION) + OUTSIDE_ALLOCATOR_GB is within the memory
CUDA reports for the GPU (torch.cuda.get_device_properties(...).total_memory: 150.11 GB on an
H200, 85.02 on an H100 SXM; fixtures/gpus.toml's cuda_total_gb). Before, `llmbench plan` held
allocated x 1.11 against the datasheet's 141 GiB (151.4 GB) for an H200, and said llama-7b's ddp
(137.1 GB allocated predicted, 137.0 measured on 4x H200 at 2 and 4 GPUs, 2026-11-28) did not fit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

OUTSIDE_ALLOCATOR_GB = 2.2
"""Device memory a training rank holds outside the caching allocator. Measured as NVML's used
memory less the rank's peak reserved and less what NVML counts as used on an idle GPU (its total
less CUDA's: 0.645 GB on an H200, 0.50 on an H100): on H200s 1.39 GB for DDP and FSDP on one GPU,
1.69 on two and four (NCCL), 1.80 for DeepSpeed on one and 2.21 on two and four (its kernels and
communicators); 979 rank records in docs/results, 2026-11-22 to 2026-11-27. The largest of them,
for every run: a verdict does not depend on the strategy's libraries."""

FRAGMENTATION = 0.02
"""Allocated memory the allocator cannot hand out again near the limit, as a share of the
allocated. Provisional: no run in docs/results was near its GPU's limit (none retried an
allocation); tools/gpu/off_default.sh measures runs that bracket it."""

CUDA_SHARE = 0.99
"""CUDA's total over the datasheet's memory: what the driver leaves to processes (H100 SXM:
85.02 GB of 80 GiB, 98.97%; H200: 150.11 GB of 141 GiB, 99.15%; torch's total_memory on the hosts
of docs/results). `llmbench plan --gpu NAME` plans for the datasheet's figure times this."""

NEAR = 0.05
"""A verdict within this share of the allocatable memory is called close: the prediction's own
error (peaks measured within -5% to +5% of it) can turn it."""


def cuda_total_gb(datasheet_gb: float) -> float:
    """The memory CUDA reports for a GPU sold with `datasheet_gb` (CUDA_SHARE)."""
    return datasheet_gb * CUDA_SHARE


def allocatable_gb(device_gb: float) -> float:
    """The most a run's peak allocated may reach on a GPU of `device_gb` (CUDA's total)."""
    return max(0.0, (device_gb - OUTSIDE_ALLOCATOR_GB) / (1 + FRAGMENTATION))


def fits(allocated_gb: float, device_gb: float) -> bool:
    return allocated_gb <= allocatable_gb(device_gb)


def close(allocated_gb: float, device_gb: float) -> bool:
    """Within NEAR of the allocatable memory, on either side."""
    usable = allocatable_gb(device_gb)
    return usable > 0 and abs(allocated_gb / usable - 1) <= NEAR


def largest_batch(
    parts: Mapping[str, float],
    batch: int,
    allocated_limit_gb: float,
    *,
    fixed_gb: float = 0.0,
    backward_extra_gb: float = 0.0,
) -> int:
    """The most sequences per rank whose predicted peak allocated stays within
    `allocated_limit_gb`, from a prediction at `batch`: activations and temporaries taken as
    proportional to the batch; `fixed_gb` the candidates that are not (the optimizer step, the end
    of backward); `backward_extra_gb` what ZeRO-1/2 allocate as backward starts, beside the
    activations but after the temporaries (peak_model.backward_bytes). 0 where even one does not
    fit."""
    if batch < 1 or fixed_gb > allocated_limit_gb:
        return 0
    base = parts["model_states"] + parts["buffers"]
    per_forward = (parts["activations"] + parts["temporaries"]) / batch
    per_backward = parts["activations"] / batch
    most = []
    for fixed, per in ((base, per_forward), (base + backward_extra_gb, per_backward)):
        if per <= 0:
            if fixed > allocated_limit_gb:
                return 0
            continue
        most.append(math.floor((allocated_limit_gb - fixed) / per))
    return max(0, min(most)) if most else 0
