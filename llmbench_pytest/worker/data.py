"""Runs inside each rank: synthetic token batches that a model can actually learn.

Each sequence is a short motif repeated to the full length, with motif tokens drawn from a
skewed (Zipf-like) distribution over a small part of the vocabulary. A model first learns the
token frequencies, then to copy the motif, so the loss falls within a few steps: the
"loss trends down" check tests training, not noise. Everything is generated from (seed,
global sample index), so ranks see different, reproducible data and no file is read.
"""

from __future__ import annotations

import torch

_MIN_MOTIF, _MAX_MOTIF = 4, 16
_ACTIVE_VOCAB = 512


def synthetic_batch(seed: int, index: int, batch: int, seq_len: int, vocab_size: int) -> torch.Tensor:
    """Batch number `index` of this stream: (batch, seq_len) int64 token ids on the CPU."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    active = min(vocab_size, _ACTIVE_VOCAB)
    weights = 1.0 / torch.arange(1, active + 1, dtype=torch.float64)  # Zipf, exponent 1
    motifs = torch.multinomial(weights, batch * _MAX_MOTIF, replacement=True, generator=g)
    motifs = motifs.view(batch, _MAX_MOTIF)
    lengths = torch.randint(_MIN_MOTIF, _MAX_MOTIF + 1, (batch, 1), generator=g)
    positions = torch.arange(seq_len).unsqueeze(0) % lengths
    return torch.gather(motifs, 1, positions)


def rank_batches(
    seed: int, rank: int, world_size: int, count: int, batch: int, seq_len: int, vocab_size: int, pin: bool
) -> list[torch.Tensor]:
    """The `count` micro-batches this rank trains on, made before timing starts.

    Pinned when the model is on a GPU, so the copy in each step is a real asynchronous
    host-to-device transfer, as a data loader with pin_memory would make it.
    """
    out = []
    for i in range(count):
        t = synthetic_batch(seed, i * world_size + rank, batch, seq_len, vocab_size)
        out.append(t.pin_memory() if pin else t)
    return out
