"""BENCHMARK_REPORT.md's "Strategy settings" and "Stragglers" sections, and which settings a
strategy is ranked at.

A strategy's settings (its buckets, prefetch and persistence, DDP's bucket, FSDP's resharding:
config/strategy_settings.py) are recorded with every run (result.json's `settings`, each with
whose value it was: the suite's default, the user's DeepSpeed file, an axis). Runs of a setting
swept off its default are their own configuration (`settings_variant`); the ranking takes each
strategy at the fastest of its settings measured in that scenario, never at a setting a user
would change (`for_ranking`), and this section says which ran and what each is worth against
the strategy's defaults. A run whose rank held the others back (result.json's `straggler`,
analysis/straggler.py) is named with what it cost a step, whether or not a check failed.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .. import fmt
from .md_table import md_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..collect import Run
    from ..configs import Config, ConfigKey


def _baseline_variant(variant: str) -> str:
    """The part of a settings variant that is the session's baseline: the user's DeepSpeed file
    (`dsconfig_NAME`) is how they run DeepSpeed; an axis off its default is a what-if."""
    return "-".join(p for p in variant.split("-") if p.startswith("dsconfig_"))


def _baseline(key: ConfigKey) -> ConfigKey:
    return key._replace(settings_variant=_baseline_variant(key.settings_variant))


def for_ranking(configs: Sequence[Config]) -> tuple[list[Config], list[str]]:
    """Each strategy once per scenario, at the fastest of its settings measured (named under its
    baseline's key, so it is ranked beside the others), and a note for each taken off its defaults."""
    best: dict[ConfigKey, Config] = {}
    for c in configs:
        base = _baseline(c.key)
        held = best.get(base)
        if held is None or (c.tokens_per_sec or 0) > (held.tokens_per_sec or 0):
            best[base] = c
    out, notes = [], []
    for base, c in best.items():
        if c.key != base:
            notes.append(
                f"{c.strategy} at {c.world_size} rank(s) is ranked at {_words(c.key.settings_variant)}, "
                "the fastest of its settings measured (Strategy settings below)"
            )
        out.append(c if c.key == base else dataclasses.replace(c, key=base))
    return out, notes


def _words(variant: str) -> str:
    """'bucket_hf_auto-persist_0' -> 'bucket hf_auto, persist 0'."""
    return ", ".join(p.replace("_", " ", 1) for p in variant.split("-") if p) or "its defaults"


def _setting_cell(settings: dict[str, Any] | None) -> str:
    if not settings:
        return fmt.NA
    parts = []
    for name, s in settings.items():
        value = s.get("value") if isinstance(s, dict) else s
        source = s.get("from") if isinstance(s, dict) else None
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        parts.append(f"{name} {shown}" + (f" ({source})" if source not in (None, "default") else ""))
    return ", ".join(parts)


def _ran_with(configs: Sequence[Config]) -> list[list[Any]]:
    rows, seen = [], set()
    for c in configs:
        settings = next((r.data.get("settings") for r in c.ok_runs if r.data.get("settings")), None)
        if settings is None:
            continue  # written before the settings were recorded, or ZeRO-0's none
        row = (c.strategy, c.key.settings_variant, _setting_cell(settings))
        if row not in seen:
            seen.add(row)
            rows.append([c.strategy, _words(c.key.settings_variant), row[2]])
    return rows


def _worth(configs: Sequence[Config]) -> list[list[Any]]:
    by_key = {c.key: c for c in configs}
    rows = []
    for c in configs:
        base = by_key.get(_baseline(c.key))
        if base is None or base is c or not (base.tokens_per_sec and c.tokens_per_sec):
            continue
        mem = fmt.NA
        if base.memory_gb and c.memory_gb is not None:
            change = fmt.signed_pct(c.memory_gb / base.memory_gb - 1)
            mem = f"{fmt.gb(base.memory_gb)} -> {fmt.gb(c.memory_gb)} ({change})"
        rows.append(
            [
                c.strategy,
                c.world_size,
                _words(c.key.settings_variant),
                f"{fmt.tokens(base.tokens_per_sec)} -> {fmt.tokens(c.tokens_per_sec)}",
                fmt.ratio(c.tokens_per_sec / base.tokens_per_sec),
                mem,
            ]
        )
    return rows


def settings(configs: Sequence[Config]) -> list[str]:
    """What each strategy ran with, and what each setting swept is worth against its defaults."""
    ran = _ran_with(configs)
    if not ran:
        return []
    out = [
        "",
        "## Strategy settings",
        "",
        "The settings each strategy ran with (in brackets: set by an axis or by the DeepSpeed file "
        "given, where not the suite's default). The defaults follow the maintainers' guidance for the "
        "model's size (DeepSpeed's autotuner and config documentation for ZeRO-3, torch's own for DDP "
        "and FSDP); rankings take each strategy at the fastest of its settings measured.",
        "",
        md_table(["strategy", "variant", "settings"], ran),
    ]
    out += [f"- {note}." for note in for_ranking(configs)[1]]
    worth = _worth(configs)
    if worth:
        headers = [
            "strategy",
            "ranks" if any(c.is_cpu for c in configs) else "GPUs",
            "setting",
            "tokens/s",
            "speed-up",
            "peak GB",
        ]
        out += [
            "",
            "What each setting swept is worth against the same strategy at its defaults:",
            "",
            md_table(headers, worth),
        ]
    return out


def stragglers(runs: Sequence[Run]) -> list[str]:
    """Every run whose rank held the others back, with what it cost a step."""
    rows = []
    for r in runs:
        found = r.data.get("straggler") or {}
        if found.get("rank") is None:
            continue
        rows.append(
            [
                r.strategy,
                r.world_size,
                found["rank"],
                found.get("measure"),
                f"{fmt.seconds(found.get('cost_sec_per_step'))} s "
                f"({fmt.pct(found.get('cost_fraction_of_step'))} of a step)",
                found.get("message") or "",
            ]
        )
    if not rows:
        return []
    return [
        "",
        "## Stragglers",
        "",
        "A rank whose own work (its optimizer step's host time, its compute, its GPU's idle) exceeded the "
        "others' by more than their noise, named whether or not a check failed: the others waited for "
        "it, and every figure of that run is of the slowed group.",
        "",
        md_table(["strategy", "ranks", "rank", "measure", "cost a step", "finding"], rows),
    ]
