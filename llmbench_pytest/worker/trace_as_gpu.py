"""What a step traced on the CPU with fake tensors computes differently from a GPU rank, put right
while step_trace.py traces it (`as_a_gpu_rank_computes`), and put back after.

Found by tracing against the peaks measured on 2x H200 (2026-11-28,
docs/results/2026-11-28-h200x2-off-default), each the whole of a gap:

- **The causal mask.** transformers makes no mask for a full sequence without padding: SDPA's
  is_causal does it inside the kernel. With fake tensors it cannot tell
  (masking_utils.find_packed_sequence_indices cannot read fake position ids and reports packed
  sequences), so it made a [batch, 1, seq, seq] mask, which SDPA turned into a 16-bit copy a layer
  saved for backward; with grouped-query attention it also repeated the keys and values for every
  head (repeat_kv) where a GPU passes them as they are (enable_gqa). llama-350m at batch 16 x 4096
  held 12.8 GB less than predicted (0.54 GB of mask a layer, 24 layers); llama-1b at 8 x 2048,
  1.07 GB; mistral-7b at 4 x 2048, 3.9 GB (mask and repeated keys and values).
- **Dropout inside attention** (GPT-2's attn_pdrop). The CPU's flash kernel has none, so SDPA fell
  back to its math path and saved every layer's batch x heads x seq x seq scores; a GPU's fused
  kernels (flash, cuDNN, memory-efficient) draw the dropout mask again in backward from the RNG
  state. gpt2 at 355M shapes, batch 16 x 1024: predicted 118 GB, held 38.
- **CUDA autocast's float32 ops** (DDP, which computes under autocast). CUDA's autocast runs pow,
  exp, layer_norm, softmax, sums and the losses in float32; the CPU's autocast lists none of the
  pointwise ones, so the trace kept them in 16 bits. GPT-2's tanh GELU (0.5 x (1 + tanh(c (x +
  0.044715 x^3)))) then saves three float32 tensors of batch x seq x 4 hidden a layer on the GPU,
  where the trace saved 16-bit ones: gpt2 at 355M shapes under DDP held 51.1 GB against 42.3
  predicted. The lists are torch's (docs: "CUDA Ops that can autocast to float32").
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ..config.spec import RunSpec

CUDA_FP32_OPS = (
    "pow", "__pow__", "__rpow__", "__rtruediv__", "__rdiv__", "acos", "asin", "cosh", "erfinv",
    "exp", "expm1", "log", "log10", "log1p", "log2", "reciprocal", "rsqrt", "sinh", "tan",
    "softplus", "layer_norm", "group_norm", "norm", "normalize", "cdist", "pdist", "dist",
    "cosine_similarity", "renorm", "cross_entropy", "nll_loss", "binary_cross_entropy_with_logits",
    "kl_div", "l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss", "poisson_nll_loss",
    "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss",
)  # fmt: skip
"""Ops CUDA's autocast runs in float32, casting 16-bit inputs up."""

CUDA_FP32_OUTPUT_OPS = ("softmax", "log_softmax", "softmin", "cumsum", "cumprod", "prod", "sum")
"""Ops CUDA's autocast runs with dtype=float32 when their input is 16-bit: a float32 result."""


@contextlib.contextmanager
def as_a_gpu_rank_computes(spec: RunSpec, mode: str) -> Iterator[None]:
    """The three corrections (module docstring), for a run on a GPU; the mask's for any run (a
    CPU rank's real tensors skip the mask too). `mode`: the trace's compute mode ("amp": autocast)."""
    gpu = spec.device == "cuda"
    with contextlib.ExitStack() as stack:
        stack.enter_context(_causal_mask_as_on_real_tensors())
        if gpu and spec.attention != "math":
            stack.enter_context(_FusedAttentionDropout())
        if gpu and mode == "amp":
            stack.enter_context(_CudaAutocastFloat32())
        yield


@contextlib.contextmanager
def _causal_mask_as_on_real_tensors() -> Iterator[None]:
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    find = getattr(masking_utils, "find_packed_sequence_indices", None)
    if find is None:
        yield
        return

    def one_sequence_a_row(position_ids: Any, *args: Any, **kwargs: Any) -> Any:
        # the model numbers each row's positions 0..seq-1 itself: on real tensors this finds one
        # sequence a row and returns None, which lets SDPA's is_causal stand for the mask; on fake
        # ones it cannot look, and reports packed sequences, which makes the mask
        if _is_fake(position_ids):
            return None
        return find(position_ids, *args, **kwargs)

    masking_utils.find_packed_sequence_indices = one_sequence_a_row
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = find


def _is_fake(value: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)


class _FusedAttentionDropout(TorchFunctionMode):
    """SDPA's dropout taken out of the traced call: a GPU's fused kernels save no dropout mask."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.nn.functional.scaled_dot_product_attention:
            if len(args) > 4:
                args = (*args[:4], 0.0, *args[5:])
            kwargs.pop("dropout_p", None)
        return func(*args, **kwargs)


def _functions(names: tuple[str, ...]) -> frozenset[Callable[..., Any]]:
    """Each name as torch, torch.Tensor and torch.nn.functional spell it, where they do."""
    places = (torch, torch.Tensor, torch.nn.functional)
    return frozenset(getattr(p, n) for n in names for p in places if hasattr(p, n))


_LOW = (torch.bfloat16, torch.float16)


class _CudaAutocastFloat32(TorchFunctionMode):
    """CUDA autocast's float32 policies, above autograd as autocast is: 16-bit inputs of the
    float32 ops are cast up (autograd sees the cast), the float32-output ops get dtype=float32."""

    up = _functions(CUDA_FP32_OPS)
    out = _functions(CUDA_FP32_OUTPUT_OPS)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in self.up and any(_low(a) for a in (*args, *kwargs.values())):
            args = tuple(a.float() if _low(a) else a for a in args)
            kwargs = {k: v.float() if _low(v) else v for k, v in kwargs.items()}
        elif func in self.out and args and _low(args[0]) and kwargs.get("dtype") is None:
            kwargs["dtype"] = torch.float32
        return func(*args, **kwargs)


def _low(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in _LOW
