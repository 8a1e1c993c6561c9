"""Runs inside each rank: models are built where they train.

Every builder (models.py, seq2seq.py) creates its module inside `on_device`, so weights are
allocated and drawn on the training device: no host-side random init (13.8 s for llama-1b on the
host CPU of an H100 machine, 0.12 s on the GPU, as measured when the builders moved onto the device)
and no copy to the device afterwards.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from collections.abc import Iterator

HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""A run's half-precision dtype names: what a builder makes the weights in, and what a traced
step or the attention warm-up computes in (fp32 is not here: its weights stay torch's default)."""


@contextlib.contextmanager
def on_device(device: torch.device, seed: int) -> Iterator[None]:
    """Build a model where it trains: every parameter and buffer created inside is allocated on
    `device` and its random weights are drawn there (a 1B model on a GPU in a fraction of a
    second, against seconds to tens of seconds on the host, and no host-to-device copy). The
    generator is seeded first, so every rank draws the same weights from the same distribution;
    a GPU's generator gives other values than the CPU's for the same seed, which changes no
    measurement."""
    torch.manual_seed(seed)
    with device:
        yield
