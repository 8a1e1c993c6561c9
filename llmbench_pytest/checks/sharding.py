"""Seed 000: ZeRO holds less than DDP per rank, FSDP between ZeRO-3 and DDP: the sharding order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .outcome import CheckOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping

# (lower, higher, strict): model states per rank must follow the sharding. ZeRO paper, fig. 1:
# ZeRO-1 partitions optimizer state, ZeRO-2 adds gradients, ZeRO-3 adds parameters.
SHARDING_ORDER: tuple[tuple[str, str, bool], ...] = (
    ("zero3", "zero2", True),
    ("zero2", "zero1", False),
    ("zero1", "ddp", True),
    ("fsdp", "ddp", True),
    ("fsdp_grad_op", "ddp", True),
    ("fsdp", "fsdp_grad_op", False),
)


STRICT_MARGIN = 0.01
"""'A < B' needs A at least 1% below B; 'A <= B' allows A up to 1% above B (allocator rounding)."""


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
        # fp8 all-gather and a fused loss change what a rank holds: compare like with like
        result.get("fused_loss", "none"),
        result.get("fp8", "none"),
        result.get("attention", "default"),
    )


def check_sharding(result: Mapping[str, Any], peers: Mapping[str, Mapping[str, Any]]) -> CheckOutcome:
    """Model states per rank follow the sharding: ZeRO-3 < ZeRO-2 <= ZeRO-1 < DDP, FSDP < DDP
    (and FSDP <= its grad-op variant < DDP).

    `peers` maps strategy name -> an earlier successful result with the same peer_key.
    """
    name = "sharding_order"
    me = result.get("strategy")
    if (result.get("world_size") or 1) < 2:
        return CheckOutcome(name, None, "world size 1: nothing is sharded")
    if result.get("offload") != "none" or result.get("model_state_gb") is None:
        return CheckOutcome(name, None, "offload runs keep states in host memory; not compared")
    compared, failures = [], []
    for lower, higher, strict in SHARDING_ORDER:
        if me not in (lower, higher):
            continue
        other = higher if me == lower else lower
        peer = peers.get(other)
        if peer is None or peer.get("model_state_gb") is None:
            continue
        lo = result["model_state_gb"] if me == lower else peer["model_state_gb"]
        hi = peer["model_state_gb"] if me == lower else result["model_state_gb"]
        sign = "<" if strict else "<="
        holds = lo <= hi * (1 - STRICT_MARGIN) if strict else lo <= hi * (1 + STRICT_MARGIN)
        text = f"{lower} {lo:.4f} GB {sign} {higher} {hi:.4f} GB"
        compared.append(text)
        if not holds:
            failures.append(text)
    if not compared:
        return CheckOutcome(name, None, f"no run to compare {me} with in this session")
    ws = result.get("world_size")
    if failures:
        return CheckOutcome(
            name,
            False,
            f"model states per rank at world size {ws} do not follow the sharding: expected "
            + "; ".join(failures)
            + ". The strategy is not partitioning what it should: check its config in result.json "
            "(strategy_config).",
        )
    return CheckOutcome(name, True, f"model states per rank at world size {ws}: " + "; ".join(compared))
