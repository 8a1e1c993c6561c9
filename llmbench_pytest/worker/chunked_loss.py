"""Runs inside each rank: llmbench's fused linear cross-entropy (--llmbench-fused-loss=chunked).

The model's own loss materialises the logits of the whole batch (batch x sequence x vocabulary,
in fp32 for the softmax): 4 GB for llama-1b at batch 16 and seq 2048, plus their gradient. This
loss never holds more than one chunk of rows: forward computes the loss *and* both gradients
chunk by chunk (as Liger's fused linear cross-entropy and torchtitan's ChunkedLossWrapper do), and
backward only scales them. With --llmbench-compile the per-chunk function is torch.compile'd, so
inductor fuses the logsumexp, softmax and one-hot around the two matmuls.

It is wired in through the LM head: `lm_head(hidden, labels)` returns the loss. The head's own
forward runs, so whatever a strategy hooks there still happens (ZeRO-3 gathers the weight,
FSDP2 unshards it), and the model's forward stays an instance method (FSDP2's root hooks run).
"""

from __future__ import annotations

from types import MethodType
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn

IGNORE_INDEX = -100  # transformers' label for "no loss here"
MAX_CHUNK_ROWS = 8192  # 8192 was slightly faster than 4096 on an H100 (llama-1b: 86.9K vs 86.5K tok/s)
MIN_CHUNK_ROWS = 256
LOGITS_BUDGET = 2**28  # elements of one chunk's logits: 1 GiB in fp32, whatever the vocabulary


def chunk_rows(vocab_size: int) -> int:
    """Rows per chunk: up to 8192, fewer for large vocabularies so one chunk's fp32 logits stay
    near 1 GiB (llama 3's 128K vocabulary: 2048 rows)."""
    return max(MIN_CHUNK_ROWS, min(MAX_CHUNK_ROWS, LOGITS_BUDGET // max(1, vocab_size)))


def _chunk_loss_and_grads(
    h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, need_grad_w: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One chunk: h [C, H] and w [V, H] in the compute dtype, y [C] labels, scale = 1 / valid rows."""
    logits = (h @ w.t()).float()  # [C, V]: the only logits that ever exist
    lse = torch.logsumexp(logits, dim=-1)
    valid = y != IGNORE_INDEX
    y0 = torch.where(valid, y, 0)
    target = logits.gather(1, y0[:, None]).squeeze(1)
    loss_sum = ((lse - target) * valid).sum()
    grad = torch.exp(logits - lse[:, None]) - F.one_hot(y0, logits.shape[1]).to(logits.dtype)
    grad = (grad * (valid * scale)[:, None]).to(h.dtype)  # dLoss/dlogits of the mean loss
    return loss_sum, grad @ w, (grad.t() @ h if need_grad_w else None)


_COMPILED: dict[str, Callable[..., Any]] = {}


def _chunk_fn(compiled: bool) -> Callable[..., Any]:
    if not compiled:
        return _chunk_loss_and_grads
    if "fn" not in _COMPILED:
        # static shapes: every chunk but a batch's last has the same shape, one graph serves them
        _COMPILED["fn"] = torch.compile(_chunk_loss_and_grads, dynamic=False)
    return _COMPILED["fn"]


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, rows: int, compiled: bool
    ) -> torch.Tensor:
        dev = h.device.type
        # autocast does not reach inside an autograd.Function's forward: take its dtype by hand
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else h.dtype
        fn = _chunk_fn(compiled)
        with torch.autocast(dev, enabled=False):
            hc, wc = h.to(dtype), w.to(dtype)
            scale = 1.0 / (y != IGNORE_INDEX).sum().clamp(min=1).float()  # a tensor: no host sync
            need_w = ctx.needs_input_grad[1]  # a frozen head (LoRA) needs no weight gradient
            grad_h = torch.empty_like(hc)
            grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if need_w else None
            loss = torch.zeros((), dtype=torch.float32, device=h.device)
            for start in range(0, hc.shape[0], rows):
                part = slice(start, start + rows)
                chunk_loss, chunk_grad_h, chunk_grad_w = fn(hc[part], wc, y[part], scale, need_w)
                loss += chunk_loss
                grad_h[part] = chunk_grad_h
                if grad_w is not None:
                    grad_w += chunk_grad_w
        ctx.save_for_backward(grad_h, grad_w)
        ctx.dtypes = (h.dtype, w.dtype)
        return loss * scale

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        grad_h, grad_w = ctx.saved_tensors
        h_dtype, w_dtype = ctx.dtypes
        gw = (grad_w * grad_out).to(w_dtype) if grad_w is not None else None
        return (grad_h * grad_out).to(h_dtype), gw, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, rows: int, compiled: bool = False
) -> torch.Tensor:
    """Mean next-token loss of hidden @ weight.T against labels, shifted as transformers shifts
    them (position t predicts labels[t + 1]; the last position predicts nothing).
    hidden [B, T, H], weight [V, H], labels [B, T]."""
    y = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX).reshape(-1)
    h = hidden.reshape(-1, hidden.shape[-1])
    return _LinearCrossEntropy.apply(h, weight, y, rows, compiled)


def patch_causal_lm(model: nn.Module, compiled: bool) -> int:
    """Make `model(input_ids=..., labels=...)` return the chunked loss (and no logits), by
    rebinding this instance's forward and its LM head's: nothing global changes. Returns the rows
    per chunk. `model` is the transformers causal LM itself (for PEFT, its base model)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    head = model.get_output_embeddings()
    rows = chunk_rows(int(head.weight.shape[0]))

    def head_forward(self: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(hidden, self.weight, labels, rows, compiled)

    def forward(
        self: nn.Module, input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None, **kw: Any
    ) -> CausalLMOutputWithPast:
        if labels is None:
            raise ValueError("the chunked loss computes the loss only: call the model with labels=")
        kw.pop("return_dict", None)
        hidden = self.base_model(input_ids=input_ids, **kw).last_hidden_state
        return CausalLMOutputWithPast(loss=self.get_output_embeddings()(hidden, labels))

    head.forward = MethodType(head_forward, head)
    model.forward = MethodType(forward, model)
    return rows
