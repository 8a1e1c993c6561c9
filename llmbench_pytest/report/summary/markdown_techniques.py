"""The report's "What each technique buys" section: every technique against the same
configuration without it, per strategy, where both ran.

Standard library and tabulate (through md_table). A technique is one of torch.compile, activation
checkpointing and the what-if axes (--llmbench-fused-loss, --llmbench-fp8, --llmbench-attention);
its baseline is the configuration that differs in that one knob, at its default, so a run with
compile, a fused loss and fp8 shows what fp8 adds on top of compile and the fused loss. The
section is absent when no such pair ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import fmt
from ..configs import ConfigKey, technique_label
from .md_table import md_table
from .table import FP8_MFU_NOTE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..configs import Config

# (ConfigKey field, its default, how a row names the technique)
TECHNIQUES: tuple[tuple[str, Any, str], ...] = (
    ("compile", False, "torch.compile"),
    ("fused_loss", "none", "fused loss"),
    ("fp8", "none", "fp8"),
    ("attention", "default", "attention"),
    ("grad_ckpt", False, "activation checkpointing"),
)


def _name(value: Any, label: str) -> str:
    """'torch.compile' for a switch, 'fused loss chunked' for an axis."""
    return label if isinstance(value, bool) else f"{label} {value}"


def _on_top_of(key: ConfigKey) -> str:
    """What the baseline already had: compile, checkpointing and the other axes."""
    parts = ["compile" if key.compile else "", "grad ckpt" if key.grad_ckpt else "", technique_label(key)]
    return ", ".join(p for p in parts if p) or "eager, nothing else"


def _attention_ran(c: Config) -> str:
    ran = {r.data.get("attention_ran") for r in c.ok_runs} - {None}
    return f" (ran {', '.join(sorted(ran))})" if ran else ""


def _shape(key: ConfigKey) -> tuple[Any, ...]:
    return (
        key.model,
        key.seq_len,
        key.per_device_batch,
        key.grad_accum,
        key.dtype,
        key.workload,
        key.hardware,
    )


def _pairs(configs: Sequence[Config]) -> list[tuple[str, Config, Config]]:
    """(ConfigKey field, without it, with it) for every configuration whose one-knob baseline ran."""
    by_key = {c.key: c for c in configs}
    out = []
    for c in configs:
        for field, default, _ in TECHNIQUES:
            if getattr(c.key, field) == default:
                continue
            base = by_key.get(c.key._replace(**{field: default}))
            if base is not None and base.tokens_per_sec and c.tokens_per_sec:
                out.append((field, base, c))
    return out


def _mfu(c: Config) -> str:
    return fmt.mfu(c.mfu) + ("*" if c.key.fp8 != "none" else "") if c.mfu is not None else fmt.NA


def _row(field: str, base: Config, c: Config) -> list[Any]:
    label = next(name for f, _, name in TECHNIQUES if f == field)
    value = getattr(c.key, field)
    technique, on_top_of = _name(value, label), _on_top_of(base.key)
    if field == "attention":  # what SDPA really ran, as the profiler saw it
        technique += _attention_ran(c)
        on_top_of += _attention_ran(base).replace(" (ran", " (default ran")
    speedup = c.tokens_per_sec / base.tokens_per_sec if base.tokens_per_sec and c.tokens_per_sec else None
    mem = fmt.NA
    if base.memory_gb and c.memory_gb is not None:
        change = fmt.signed_pct(c.memory_gb / base.memory_gb - 1)
        mem = f"{fmt.gb(base.memory_gb)} -> {fmt.gb(c.memory_gb)} ({change})"
    return [
        c.strategy,
        c.world_size,
        technique,
        on_top_of,
        f"{fmt.tokens(base.tokens_per_sec)} -> {fmt.tokens(c.tokens_per_sec)}",
        fmt.ratio(speedup),
        f"{_mfu(base)} -> {_mfu(c)}",
        mem,
    ]


def render(configs: Sequence[Config]) -> list[str]:
    pairs = _pairs(configs)
    tried = [c for c in configs if any(getattr(c.key, f) != d for f, d, _ in TECHNIQUES[1:4])]
    if not pairs and not tried:
        return []
    out = [
        "",
        "## What each technique buys",
        "",
        "Each row is one technique against the same configuration without it (same model, shapes, "
        "strategy, world size, hardware and other techniques), where both ran: tokens/s, MFU and the "
        "peak memory per rank. MFU counts model FLOPs only (6N + 12LHQT, no recompute) against the "
        "bf16 dense peak.",
    ]
    if not pairs:
        names = ", ".join(dict.fromkeys(f"{c.strategy} ({technique_label(c.key)})" for c in tried[:6]))
        return [*out, "", f"No run without the technique to compare with for: {names}."]
    shapes: dict[tuple[Any, ...], list[tuple[str, Config, Config]]] = {}
    for pair in pairs:
        shapes.setdefault(_shape(pair[2].key), []).append(pair)
    headers = ["strategy", "GPUs", "technique", "on top of", "tokens/s", "speed-up", "MFU", "peak GB"]
    if any(c.is_cpu for _, _, c in pairs):
        headers[1] = "ranks"
    for (model, seq, batch, accum, dtype, workload, hardware), rows in shapes.items():
        what = "" if workload == "causal_lm" else f" ({workload})"
        out += ["", f"### {model}{what}, seq {seq}, batch {batch}x{accum} per rank, {dtype}, {hardware}", ""]
        out.append(md_table(headers, [_row(*pair) for pair in rows]))
    if any(c.key.fp8 != "none" for _, b, c in pairs):
        out += ["", FP8_MFU_NOTE + "; it is not a bf16 result. result.json adds `mfu_vs_fp8_peak`."]
    if any(c.key.hardware == "CPU" for _, _, c in pairs):
        out += ["", "CPU runs are smoke (fp8 there is emulated): no ratio here is a performance claim."]
    return out
