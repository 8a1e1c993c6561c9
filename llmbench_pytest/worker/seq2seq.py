"""Runs inside each rank: seed 003's encoder-decoder Transformer, built from its config.

The shapes are the seed's flags (d_model, nhead, num_encoder_layers, num_decoder_layers,
dim_feedforward) plus a vocabulary and a position table (max_len). Layers are torch's own
TransformerEncoderLayer and TransformerDecoderLayer (pre-norm, no dropout: a benchmark wants the
same work every step), held in lists rather than inside nn.Transformer so that each layer is a
unit FSDP can shard and activation checkpointing can recompute.

A batch is one tensor of (batch, 2 x seq_len) tokens: the source, then the target. The decoder
reads the target shifted right behind a start token and predicts the target; the loss is the
cross entropy over the target tokens. Tokens in the throughput figures count target positions
(each paired with one source position), so FLOPs per token are 6 per matmul parameter plus the
attention products of three attention blocks per position: encoder self, decoder self, cross.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..flops import FlopsModel
from ..presets import ENCDEC_CONFIG_KEYS, ModelPreset
from ..spec import RunSpec

BLOCKS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


class EncoderDecoder(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        nhead: int,
        num_encoder_layers: int,
        num_decoder_layers: int,
        dim_feedforward: int,
        max_len: int,
    ) -> None:
        super().__init__()
        if d_model % nhead:
            raise ValueError(f"nhead {nhead} must divide d_model {d_model}")
        self.vocab_size, self.d_model, self.nhead = vocab_size, d_model, nhead
        self.embed = nn.Embedding(vocab_size, d_model)  # shared by source and target
        self.pos = nn.Embedding(max_len, d_model)
        common: dict[str, Any] = dict(
            d_model=d_model,
            nhead=nhead,
            dim_feedforward=dim_feedforward,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.ModuleList(nn.TransformerEncoderLayer(**common) for _ in range(num_encoder_layers))
        self.decoder = nn.ModuleList(nn.TransformerDecoderLayer(**common) for _ in range(num_decoder_layers))
        self.encoder_norm = nn.LayerNorm(d_model)
        self.decoder_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.checkpointing = False

    @property
    def start_token(self) -> int:
        """The decoder's first input; the synthetic data never uses the vocabulary's last id."""
        return self.vocab_size - 1

    def _layer(self, layer: nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.checkpointing and self.training:
            return checkpoint(layer, *args, use_reentrant=False, **kwargs)
        return layer(*args, **kwargs)

    def forward(self, source: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(source.shape[1], device=source.device)
        x = self.embed(source) + self.pos(positions)
        for layer in self.encoder:
            x = self._layer(layer, x)
        memory = self.encoder_norm(x)
        length = target_in.shape[1]
        y = self.embed(target_in) + self.pos(torch.arange(length, device=target_in.device))
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=y.device, dtype=y.dtype)
        for layer in self.decoder:
            y = self._layer(layer, y, memory, tgt_mask=mask, tgt_is_causal=True)
        return self.head(self.decoder_norm(y))


def build_module(config: dict[str, Any]) -> EncoderDecoder:
    missing = [k for k in ENCDEC_CONFIG_KEYS if k not in config]
    if missing:
        raise ValueError(f"encoder-decoder config lacks {', '.join(missing)}")
    return EncoderDecoder(**{k: int(config[k]) for k in ENCDEC_CONFIG_KEYS})


def seq2seq_loss(module: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Cross entropy of the target given the source; `module` may be wrapped (DDP, FSDP, DeepSpeed)."""
    length = batch.shape[1] // 2
    source, target = batch[:, :length], batch[:, length:]
    inner = getattr(module, "module", module)  # DDP and DeepSpeed hold the model as .module
    start = torch.full_like(target[:, :1], inner.start_token)
    logits = module(source, torch.cat([start, target[:, :-1]], dim=1))
    # the loss in fp32 whatever the compute precision: half-precision log-softmax loses the tail
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1))


def matmul_params(module: EncoderDecoder) -> int:
    """Everything but the two embedding tables takes part in matrix products."""
    lookups = module.embed.weight.numel() + module.pos.weight.numel()
    return sum(p.numel() for p in module.parameters()) - lookups


def build_seq2seq(spec: RunSpec, preset: ModelPreset, device: torch.device) -> Any:
    from .models import BuiltModel

    torch.manual_seed(spec.seed)  # same weights on every rank
    with device:
        module = build_module(preset.config)
    module.checkpointing = spec.grad_ckpt
    module.train()
    n_params = sum(p.numel() for p in module.parameters())
    enc, dec = len(module.encoder), len(module.decoder)
    head_dim = module.d_model // module.nhead
    flops = FlopsModel(
        n_params=n_params,
        matmul_params=matmul_params(module),
        layers=enc + 2 * dec,  # attention products: encoder self; decoder self and cross
        heads=module.nhead,
        head_dim=head_dim,
        seq_len=spec.seq_len,
    )
    return BuiltModel(
        module=module,
        loss=seq2seq_loss,
        vocab_size=module.vocab_size,
        flops=flops,
        block_classes=BLOCKS,
        hidden_size=module.d_model,
        summary={
            "name": preset.name,
            "architecture": "EncoderDecoder(torch.nn.TransformerEncoderLayer/DecoderLayer)",
            "config_path": preset.path,
            "params": n_params,
            "matmul_params": flops.matmul_params,
            "layers": enc + dec,
            "encoder_layers": enc,
            "decoder_layers": dec,
            "hidden_size": module.d_model,
            "heads": module.nhead,
            "head_dim": head_dim,
            "dim_feedforward": int(preset.config["dim_feedforward"]),
            "vocab_size": module.vocab_size,
            "flops_per_token": flops.per_token,
            "tokens_counted": "target positions (each paired with one source position)",
            "workload": "seq2seq",
        },
    )
