"""The benchmark card's memory order, on peak memory: "ZeRO strategies use less than DDP; FSDP uses
less than DDP but more than ZeRO-3", against the session's runs of the same model, shapes, precision
and world size.

The order is judged against each run's predicted peak (analysis/peak_model.py: peak_predicted_gb),
which knows where the card's order does not hold: with LoRA on mistral-7b, DeepSpeed's ZeRO-3
linear saves each frozen layer's input for backward (plan/predict.py), and zero3 peaked 20% above
fsdp, each within 5% of its prediction (4x H200 host, 2026-11-27: 35.3 against 29.3 GB
at 2 GPUs). A pair (lower, higher) breaks the order when the lower strategy's peak is above the
higher's and more than PEAK_TOLERANCE above its own prediction: where a strategy that does not
shard what its name says peaks. A peak below its prediction is never held against its run
(memory.py: peak_prediction).

Where either run of a pair has no prediction, the card's fixed rule applies, and the message says
so: the lower peak at least BELOW_DDP_MARGIN under DDP's, and ZeRO-3 at most FSDP_BELOW_ZERO3 above
FSDP (2x H200, llama-1b: fsdp peaked 8.4% and fsdp_grad_op 4.7% under zero3).

At world size 1 nothing is sharded; on a CPU the peak RSS is mostly the process's libraries
(0.58 GB for DDP's 0.08 GB of model states with llama-tiny; DeepSpeed's add 0.1 GB), which no
strategy decides: neither is compared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analysis.peak_model import PEAK_TOLERANCE
from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping

BELOW_DDP_MARGIN = 0.01
"""Without predictions: a sharded strategy's peak at least 1% under DDP's (measured 24% to 30% under
at 2x H200)."""
FSDP_BELOW_ZERO3 = 0.10
"""Without predictions: FSDP's peak may sit up to 10% under ZeRO-3's (measured 8.4% under at 2x H200)."""

ZERO = ("zero1", "zero2", "zero3", "zero1_offload", "zero2_offload", "zero3_offload", "zero3_nvme")
FSDP = ("fsdp", "fsdp_grad_op")
SHARDING_ORDER: tuple[tuple[str, str, float], ...] = (
    *((z, "ddp", -BELOW_DDP_MARGIN) for z in ZERO),
    *((f, "ddp", -BELOW_DDP_MARGIN) for f in FSDP),
    *(("zero3", f, FSDP_BELOW_ZERO3) for f in FSDP),
)
"""(lower, higher, slack); without predictions: peak(lower) <= peak(higher) x (1 + slack)."""


def peer_key(result: Mapping[str, Any]) -> tuple[Any, ...]:
    """Runs whose memory may be compared: same model, shapes, precision and world size."""
    return (
        result.get("model"),
        result.get("seq_len"),
        result.get("per_device_batch"),
        result.get("grad_accum"),
        result.get("dtype"),
        result.get("world_size"),
        result.get("grad_ckpt"),
        result.get("device"),
        result.get("workload"),
        result.get("compile"),
        result.get("optimizer"),
        result.get("lora_rank"),
        result.get("data"),
        # fp8 all-gather and a fused loss change what a rank holds: compare like with like
        result.get("fused_loss", "none"),
        result.get("fp8", "none"),
        result.get("attention", "default"),
        # a strategy's setting off its default (its buckets, say) is that run's own peer group
        result.get("settings_variant") or "",
    )


def _relation(lower: str, higher: str, slack: float) -> str:
    if slack < 0:
        return f"{lower} at least {-slack:.0%} below {higher}"
    return f"{lower} at most {slack:.0%} above {higher}"


def _judge_pair(
    lower: tuple[str, Mapping[str, Any]], higher: tuple[str, Mapping[str, Any]], slack: float
) -> tuple[str, bool]:
    """(what the pair shows, whether it breaks the order) for two runs' measured peaks."""
    (lo_name, lo), (hi_name, hi) = lower, higher
    lo_gb, hi_gb = float(lo["peak_vram_gb"]), float(hi["peak_vram_gb"])
    lo_pred, hi_pred = lo.get("peak_predicted_gb"), hi.get("peak_predicted_gb")
    text = f"{lo_name} {lo_gb:.3f} GB vs {hi_name} {hi_gb:.3f} GB ({lo_gb / hi_gb - 1:+.1%})"
    if not lo_pred or not hi_pred:
        missing = " and ".join(n for n, p in ((lo_name, lo_pred), (hi_name, hi_pred)) if not p)
        text += f", no peak prediction for {missing}: the card's rule, {_relation(lo_name, hi_name, slack)}"
        return text, lo_gb > hi_gb * (1 + slack)
    own = lo_gb / lo_pred - 1
    text += (
        f", predicted {lo_pred:.3f} vs {hi_pred:.3f} GB ({lo_pred / hi_pred - 1:+.1%}): {lo_name} "
        f"{own:+.1%} against its prediction, {hi_name} {hi_gb / hi_pred - 1:+.1%}"
    )
    breaks = lo_gb > hi_gb and own > PEAK_TOLERANCE
    if breaks:
        text += f"; {lo_name} sits above {hi_name} and more than {PEAK_TOLERANCE:.0%} above its prediction"
    return text, breaks


def check_sharding(result: Mapping[str, Any], peers: Mapping[str, Mapping[str, Any]]) -> CheckOutcome:
    """Peak memory per rank follows the benchmark card's order (SHARDING_ORDER) as the predictions
    place it (module docstring) against `peers`: strategy name -> an earlier successful result
    with the same peer_key."""
    name = "sharding_order"
    me = str(result.get("strategy"))
    if (result.get("world_size") or 1) < 2:
        return CheckOutcome(name, None, "world size 1: nothing is sharded")
    if result.get("device") != "cuda":
        return CheckOutcome(
            name, None, "CPU: peak RSS is mostly the process's libraries, which no strategy decides"
        )
    compared, failures = [], []
    for lower, higher, slack in SHARDING_ORDER:
        if me not in (lower, higher) or result.get("peak_vram_gb") is None:
            continue
        peer = peers.get(higher if me == lower else lower)
        if peer is None or peer.get("peak_vram_gb") is None:
            continue
        pair = (lower, result if me == lower else peer), (higher, peer if me == lower else result)
        text, breaks = _judge_pair(*pair, slack)
        compared.append(text)
        if breaks:
            failures.append(text)
    if not compared:
        return CheckOutcome(name, None, f"no run of this session to compare {me}'s peak memory with")
    ws, peak = result.get("world_size"), result.get("peak_vram_gb")
    if failures:
        return CheckOutcome(
            name,
            False,
            f"{me}: peak GPU memory per rank at world size {ws} breaks the expected order of the "
            "strategies (ZeRO and FSDP below DDP, FSDP close to ZeRO-3, as the predictions place "
            "them): " + "; ".join(failures) + ". Check the configuration of the strategy above its "
            "peer (strategy_config in its result.json) and its model_states and peak_prediction "
            "checks: a strategy that does not shard what its name says peaks higher than predicted.",
            peak,
        )
    return CheckOutcome(
        name, True, f"peak GPU memory per rank at world size {ws}: " + "; ".join(compared), peak
    )
