"""The default learning rate: what pre-training a model of this size would use.

A benchmark measures speed, but its loss must fall as training's does, or the loss check fails a
healthy strategy. One learning rate for every size does not do that: at the suite's old 1e-3, a 7B
model's loss rose from 11.5 to 15-32 and stayed there under every strategy (llama-7b and
mistral-7b, ddp/fsdp/zero3 at 1 and 2 GPUs on 4x H200, 2026-11-28,
docs/results/2026-11-28-h200x4-off-default), which no one pre-training a 7B model would run.

The rule is GPT-3's (Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1): the
peak learning rate of each model size it trained, interpolated on log-log axes between them. Below
the table's smallest model the trend gives more than 1e-3; 1e-3 stays the cap, the rate the suite's
small and tiny models have always trained at. Pre-training (the causal_lm workload) only: LoRA
trains adapters, not the model, and the encoder-decoder benchmark is that benchmark's own model;
their losses fall at 1e-3 in every kept session. `--llmbench-lr` sets any rate.

The rate rises to that peak linearly over the first updates, as every pre-training run starts: from
its initialisation AdamW's first updates move every weight by about the full rate, whatever the
gradient's scale, since its second-moment estimate rests on a handful of gradients. Without a
warm-up, llama-3b's loss at its GPT-3 rate (1.5e-4, batch 8 x 512) went 11.1, 9.5, 13.0, 17.0 over
its first updates and failed the loss check at 2 GPUs (docs/results/2026-11-28-h200x4-off-default).
The length is Ma & Yarats' untuned rule ("On the adequacy of untuned warmup for adaptive
optimization", AAAI 2021): linear over 2 / (1 - beta2) updates, the time AdamW's second moment
takes to rest on enough gradients; with the suite's beta2 of 0.95, 40 updates. A real pre-training
run warms up for thousands of updates (GPT-3: 375M tokens), so every update a benchmark measures lies
inside one: the rate a run measures at does not move its speed, only how its loss falls.
`--llmbench-lr-warmup` sets any length (0: the peak from the first update).
"""

from __future__ import annotations

import itertools
import math

GPT3_PEAK_LR: tuple[tuple[float, float], ...] = (
    (125e6, 6.0e-4),
    (350e6, 3.0e-4),
    (760e6, 2.5e-4),
    (1.3e9, 2.0e-4),
    (2.7e9, 1.6e-4),
    (6.7e9, 1.2e-4),
    (13e9, 1.0e-4),
    (175e9, 0.6e-4),
)
"""(parameters, peak learning rate) of the GPT-3 models, Brown et al. 2020, Table 2.1."""

ADAM_BETAS = (0.9, 0.95)
"""AdamW's betas for every strategy (GPT-3's, and LLaMA's)."""

SMALL_MODEL_LR = 1e-3
"""The cap, for models below the table (tiny CPU models, the encoder-decoder's, LoRA's adapters)."""


def pretraining_lr(params: int) -> float:
    """GPT-3's peak learning rate for a model of `params` parameters, interpolated on log-log axes
    (extrapolated past the ends along the nearest segment), at most SMALL_MODEL_LR."""
    if params <= 0:
        raise ValueError(f"a model has parameters; got {params}")
    x = math.log(params)
    pairs = list(itertools.pairwise(GPT3_PEAK_LR))
    (n0, lr0), (n1, lr1) = next(
        ((a, b) for a, b in pairs if params <= b[0]),
        pairs[-1],  # past the largest: the last segment's trend
    )
    slope = (math.log(lr1) - math.log(lr0)) / (math.log(n1) - math.log(n0))
    lr = math.exp(math.log(lr0) + slope * (x - math.log(n0)))
    return min(SMALL_MODEL_LR, lr)


def default_lr(workload: str, params: int | None) -> float:
    """The learning rate a run gets when --llmbench-lr is not given."""
    if workload != "causal_lm" or not params:
        return SMALL_MODEL_LR
    return pretraining_lr(params)


def untuned_warmup(beta2: float = ADAM_BETAS[1]) -> int:
    """Ma & Yarats' linear warm-up length for Adam: 2 / (1 - beta2) updates (40 at beta2 0.95)."""
    return round(2 / (1 - beta2))


def default_lr_warmup(workload: str) -> int:
    """The warm-up a run gets when --llmbench-lr-warmup is not given: pre-training's, as its rate;
    LoRA and the encoder-decoder train at their rate from the first update, as they always have."""
    return untuned_warmup() if workload == "causal_lm" else 0


def lr_at(peak: float, warmup: int, update: int) -> float:
    """The rate of optimizer update number `update` (1-based): peak x update / warmup until the
    warm-up ends, the peak after."""
    if update < 1:
        raise ValueError(f"updates count from 1; got {update}")
    return peak if warmup <= 0 else peak * min(1.0, update / warmup)
