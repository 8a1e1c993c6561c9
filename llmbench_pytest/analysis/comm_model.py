"""Analytical communication volume per rank and step, by strategy. Standard library only.

The performance analysis guide's CommunicationProfiler idea, with the ZeRO paper's accounting
(Rajbhandari et al. 2020, section 7): for Ψ parameters, data parallelism all-reduces the gradients
(2Ψ elements through each rank's links, as a reduce-scatter plus an all-gather); ZeRO-1 and -2
reduce-scatter gradients and all-gather updated parameters (also 2Ψ); ZeRO-3 and full FSDP
all-gather the parameters again for backward (3Ψ). A ring collective over N ranks moves (N-1)/N of
its buffer through each rank: that is the "bus" volume nccl-tests reports, and what bus bandwidth
divides. Element sizes follow each strategy's precision: DDP reduces fp32 gradients of its fp32
master weights; FSDP gathers bf16/fp16 parameters and reduce-scatters fp32; DeepSpeed moves 16-bit
parameters and gradients in bf16/fp16 runs.
"""

from __future__ import annotations

from dataclasses import dataclass

_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class CommVolume:
    collectives: tuple[tuple[str, float], ...]
    """(collective, bus bytes per rank per step)."""

    @property
    def bus_bytes(self) -> float:
        return sum(b for _, b in self.collectives)

    def describe(self) -> str:
        return ", ".join(f"{name} {b / 1e9:.3f} GB" for name, b in self.collectives) or "none"


def per_step(strategy: str, params: int, world_size: int, dtype: str, grad_accum: int = 1) -> CommVolume:
    """Bus bytes each rank moves per optimizer step (gradient accumulation syncs once per step,
    except ZeRO-3/FSDP, which gather parameters for every micro-step)."""
    n = world_size
    if n < 2:
        return CommVolume(())
    ring = (n - 1) / n
    low = _BYTES.get(dtype, 4)  # the 16-bit copy in mixed precision, fp32 otherwise
    if strategy == "ddp":
        return CommVolume((("all_reduce(grads fp32)", 2 * ring * params * 4),))
    if strategy == "zero0":
        return CommVolume((("all_reduce(grads)", 2 * ring * params * low),))
    if strategy in ("zero1", "zero2"):
        return CommVolume(
            (("reduce_scatter(grads)", ring * params * low), ("all_gather(params)", ring * params * low))
        )
    if strategy == "zero3":
        gathers = 2 * grad_accum  # forward and backward of every micro-step
        return CommVolume(
            (
                ("all_gather(params)", gathers * ring * params * low),
                ("reduce_scatter(grads)", ring * params * low),
            )
        )
    if strategy in ("fsdp", "fsdp_grad_op"):
        gathers = (2 if strategy == "fsdp" else 1) * grad_accum
        return CommVolume(
            (
                ("all_gather(params)", gathers * ring * params * low),
                ("reduce_scatter(grads fp32)", ring * params * 4),
            )
        )
    raise ValueError(f"no communication model for strategy {strategy!r}")
