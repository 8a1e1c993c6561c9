"""Training FLOPs per token and model FLOPs utilisation (MFU). Standard library only.

FLOPs per token = 6N + 12·L·H·Q·T (PaLM, Chowdhery et al. 2022, appendix B): 6 FLOPs per
matmul parameter per token for forward and backward, plus the attention score and value
products, which grow with the sequence length T. N counts parameters that take part in matrix
products (embedding lookups do not; a tied LM head counts once). Recomputation from activation
checkpointing is not counted: MFU measures useful model FLOPs, not hardware FLOPs.
Frozen parameters (LoRA's base model) take part in forward (2) and in the input gradients of
backward (2), but have no weight gradients: 4 FLOPs per token each instead of 6.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FlopsModel:
    n_params: int
    matmul_params: int
    layers: int
    heads: int
    head_dim: int
    seq_len: int
    frozen_matmul_params: int = 0
    """Of matmul_params, those that are not trained."""

    @property
    def per_token(self) -> float:
        attention = 12 * self.layers * self.heads * self.head_dim * self.seq_len
        trained = self.matmul_params - self.frozen_matmul_params
        return 6.0 * trained + 4.0 * self.frozen_matmul_params + attention


def tflops_per_gpu(flops_per_token: float, tokens_per_sec: float, world_size: int) -> float:
    """Achieved model TFLOP/s on each GPU."""
    return flops_per_token * tokens_per_sec / world_size / 1e12


def mfu(achieved_tflops_per_gpu: float, peak_tflops: float) -> float:
    """Fraction (0..1) of the GPU's peak dense throughput the model's FLOPs reached."""
    return achieved_tflops_per_gpu / peak_tflops
