"""Runs inside each rank: the encoder-decoder benchmark's Transformer, built from its config.

The shapes are that benchmark's flags (d_model, nhead, num_encoder_layers, num_decoder_layers,
dim_feedforward) plus a vocabulary and a position table (max_len). Each layer is a pre-norm block
(no dropout: a benchmark wants the same work every step) with the parameters of torch's
TransformerEncoderLayer/DecoderLayer, attention through scaled_dot_product_attention. The layers
are written here rather than taken from torch.nn for two reasons:
- torch.compile does not trace frames inside torch.nn (Dynamo's skip list), so compiling
  torch's own layers compiled nothing; a forward defined here compiles;
- every weight is used through the Linear that holds it, so ZeRO-3, which gathers a module's
  parameters when that module runs, sees each one (nn.MultiheadAttention reads its packed input
  projection directly).
The layers sit in lists, so each is a unit FSDP can shard and activation checkpointing can
recompute.

A batch is one tensor of (batch, 2 x seq_len) tokens: the source, then the target. The decoder
reads the target shifted right behind a start token and predicts the target; the loss is the
cross entropy over the target tokens. Tokens in the throughput figures count target positions
(each paired with one source position), so FLOPs per token are 6 per matmul parameter plus the
attention products of three attention blocks per position: encoder self, decoder self, cross.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..analysis.flops import FlopsModel
from ..config.presets import ENCDEC_CONFIG_KEYS, ModelPreset
from .built import BuiltModel
from .device_init import on_device

if TYPE_CHECKING:
    from ..config.spec import RunSpec


class Attention(nn.Module):
    """Multi-head attention: self-attention (one projection to queries, keys and values) or
    cross-attention (queries from the decoder, keys and values from the encoder's output)."""

    def __init__(self, d_model: int, nhead: int, cross: bool) -> None:
        super().__init__()
        self.nhead = nhead
        if cross:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.nhead, -1)).transpose(1, 2)  # (batch, heads, seq, head_dim)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        if memory is None:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            q = self.q(x)
            k, v = self.kv(memory).chunk(2, dim=-1)
        out = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v), is_causal=causal)
        return self.out(out.transpose(1, 2).flatten(2))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, dim_feedforward: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(F.gelu(self.linear1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.self_attn = Attention(d_model, nhead, cross=False)
        self.ff = FeedForward(d_model, dim_feedforward)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int) -> None:
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.self_attn = Attention(d_model, nhead, cross=False)
        self.cross_attn = Attention(d_model, nhead, cross=True)
        self.ff = FeedForward(d_model, dim_feedforward)

    def forward(self, y: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        y = y + self.self_attn(self.norm1(y), causal=True)
        y = y + self.cross_attn(self.norm2(y), memory)
        return y + self.ff(self.norm3(y))


BLOCKS = (EncoderLayer, DecoderLayer)


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
        self.encoder = nn.ModuleList(
            EncoderLayer(d_model, nhead, dim_feedforward) for _ in range(num_encoder_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(d_model, nhead, dim_feedforward) for _ in range(num_decoder_layers)
        )
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
        y = self.embed(target_in) + self.pos(torch.arange(target_in.shape[1], device=target_in.device))
        for layer in self.decoder:
            y = self._layer(layer, y, memory)
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


def build_seq2seq(spec: RunSpec, preset: ModelPreset, device: torch.device) -> BuiltModel:
    with on_device(device, spec.seed):
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
            "architecture": "EncoderDecoder(pre-norm layers, scaled_dot_product_attention)",
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
