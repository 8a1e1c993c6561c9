"""The console summary: one tabulate table, one row per configuration.

Columns that are the same for every row (model, sequence length, batch, hardware) move into a
header line, so the table keeps to what differs. Under the table, given the recommendations, one
line per scenario names the fastest configuration that fits, or the ones tied for it within the
measurement's noise and the one chosen among them (ranking.py decides, recommend.py chooses; the
report's Recommendation has the evidence). Notes then say what a '-' means, and at most two lines
flag what the GPU measurements found (throttling, model states far off their prediction).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from ...analysis.memory_model import GAP_FLAG
from .. import fmt, gpu_truth
from ..configs import Config, ConfigKey

if TYPE_CHECKING:
    from ..scaling import Scaling
    from .recommend import Recommendation

CPU_NOTE = "CPU smoke: these runs show the code paths work; their speed is not a performance claim."


def scaling_cell(c: Config, s: Scaling | None) -> str:
    if s is None:
        return fmt.NA
    if s.is_baseline(c):
        return "baseline"
    return f"{fmt.pct(s.efficiency, 0)} ({s.mode}, vs ws{s.baseline_ws})"


def window_cell(c: Config) -> str:
    """'+-0.8%' where the window stopped at its precision target, else the reason after it
    ('+-3.1% budget': the time budget ended it first; 'cap': the step cap; 'fixed': a fixed count)."""
    width, why = c.window
    if width is None:
        return fmt.NA
    return fmt.pct(width) if why in (None, "precision") else f"{fmt.pct(width)} {why}"


def memory_header(configs: Sequence[Config]) -> tuple[str, bool]:
    """The memory column's title, and whether cells must say their kind (mixed CPU and GPU)."""
    kinds = {c.memory_kind for c in configs}
    if len(kinds) == 1:
        return f"peak GB ({kinds.pop()})", False
    return "peak GB", True


FP8_MFU_NOTE = "MFU* (fp8 runs): model FLOPs against the bf16 dense peak, with the matmuls in fp8"


def mfu_cell(c: Config) -> str:
    if c.mfu is None:
        return "n/a"
    return fmt.mfu(c.mfu) + ("*" if c.key.fp8 != "none" else "")  # * : FP8_MFU_NOTE


Column = tuple[str, Callable[[Config], Any]]


def lead_columns(configs: Sequence[Config]) -> tuple[list[Column], list[str]]:
    """The columns before the strategy that vary between configurations (hardware, model, seq,
    batch, dtype, the speed options, and the workload's knobs: optimizer, LoRA rank, data
    source), and 'name value' for those that do not."""
    varying: list[Column] = [
        ("hardware", lambda c: c.key.hardware),
        ("model", lambda c: c.key.model),
        ("seq", lambda c: c.key.seq_len),
        ("batch", lambda c: f"{c.key.per_device_batch}x{c.key.grad_accum}"),
        ("dtype", lambda c: c.key.dtype),
        ("compile", lambda c: "yes" if c.key.compile else "no"),
        ("fused loss", lambda c: c.key.fused_loss),
        ("fp8", lambda c: c.key.fp8),
        ("attention", lambda c: c.key.attention),
        ("settings", lambda c: c.key.settings_variant or "default"),  # a strategy's own, swept
        ("grad ckpt", lambda c: "yes" if c.key.grad_ckpt else "no"),
        ("workload", lambda c: c.key.workload),
        ("optimizer", lambda c: c.key.optimizer),
        ("LoRA r", lambda c: c.key.lora_rank),
        ("data", lambda c: c.key.data),
    ]
    # a workload knob at its default says nothing in the header line
    quiet = {
        "compile": "no",
        "fused loss": "none",
        "fp8": "none",
        "attention": "default",
        "settings": "default",
        "grad ckpt": "no",
        "workload": "causal_lm",
        "optimizer": "adamw_torch",
        "LoRA r": 0,
        "data": "memory",
    }
    lead: list[Column] = []
    fixed: list[str] = []
    for name, get in varying:
        values = {get(c) for c in configs}
        if len(values) > 1:
            lead.append((name, get))
        elif values and (value := values.pop()) != quiet.get(name, object()):
            fixed.append(f"{name} {value}")
    return lead, fixed


def summary_rows(
    configs: Sequence[Config], scaling: Mapping[ConfigKey, Scaling]
) -> tuple[list[str], list[list[Any]], list[str]]:
    """(headers, rows, header lines naming the columns that do not vary)."""
    lead, fixed = lead_columns(configs)
    mem_title, mem_mixed = memory_header(configs)
    any_cpu = any(c.is_cpu for c in configs)
    ws_title = "ranks" if any_cpu else "GPUs"
    headers = [
        *(n for n, _ in lead),
        "strategy",
        ws_title,
        "tokens/s",
        "step s",
        "step CV",
        "mean +-",
        mem_title,
        "scaling",
        "MFU",
        "status",
        "failed checks",
    ]
    rows: list[list[Any]] = []
    for c in configs:
        mem = fmt.gb(c.memory_gb)
        if mem_mixed and c.memory_gb is not None:
            mem += " RSS" if c.is_cpu else " GPU"
        rows.append(
            [
                *(get(c) for _, get in lead),
                c.strategy,
                c.world_size,
                fmt.tokens(c.tokens_per_sec),
                fmt.seconds(c.step_time),
                fmt.pct(c.step_cv_in_run),
                window_cell(c),
                mem,
                scaling_cell(c, scaling.get(c.key)),
                mfu_cell(c),
                c.status,
                ", ".join(c.failed_check_names) or "",
            ]
        )
    return headers, rows, fixed


def notes(configs: Sequence[Config]) -> list[str]:
    out: list[str] = []
    if any(c.is_cpu for c in configs):
        out.append(CPU_NOTE)
    reasons = sorted({c.mfu_reason for c in configs if c.mfu is None and c.mfu_reason})
    out.extend(f"MFU n/a: {r}" for r in reasons)
    if any(c.key.fp8 != "none" and c.mfu is not None for c in configs):
        out.append(FP8_MFU_NOTE + ".")
    out.append(
        "step CV: the coefficient of variation of the step times within the run (step_cv_in_run; "
        "the step_time_cv check compares runs: the repeats of --llmbench-repeat, or the epochs)."
    )
    out.append(
        "mean +-: the 95% interval of the mean step time, as a share of it; after it, what ended the "
        "window before that precision was reached (budget: the time budget, cap: the step cap, fixed: "
        "a fixed step count)."
    )
    out.append(
        "scaling: T(N) / ((N/N0) x T(N0)) against ws N0 (1 where a 1-GPU run exists); weak = fixed "
        "per-device batch, strong = fixed global batch."
    )
    return out + gpu_notes(configs)


def _few(items: Sequence[str], total: int, limit: int = 4) -> str:
    """The first few names (deduplicated: one label may stand for several scenarios), and how many
    of the `total` are not named."""
    named = list(dict.fromkeys(items))[:limit]
    return ", ".join(named) + (f" and {total - len(named)} more" if total > len(named) else "")


def gpu_notes(configs: Sequence[Config]) -> list[str]:
    """At most two lines from the GPU measurements: throttling, and model states far off their
    prediction; the report's GPU sections have the detail."""
    out: list[str] = []
    throttled = [(c, ts) for c in configs if (ts := gpu_truth.config_throttles(c))]
    bad = [c for c, ts in throttled if gpu_truth.needs_attention(ts)]
    if bad:
        out.append(
            f"GPU slowed by heat or hardware in {len(bad)} configuration{'s' if len(bad) != 1 else ''} "
            f"({_few([c.label() for c in bad], len(bad))}): check cooling and power; see GPU health in "
            "BENCHMARK_REPORT.md."
        )
    elif throttled:
        monitored = sum(gpu_truth.has_monitor(c) for c in configs)
        out.append(
            f"GPU throttled by the power cap alone in {len(throttled)} of {monitored} configurations: "
            f"{gpu_truth.POWER_CAP_VERDICT}."
        )
    off = [
        (c.label(), g)
        for c in configs
        if any(r.data.get("model_state_flag") for r in c.ok_runs)
        and (g := c.mean("model_state_gap")) is not None
    ]
    if off:
        out.append(
            f"model states more than {GAP_FLAG:.0%} off the ZeRO-paper prediction in {len(off)} "
            f"configuration{'s' if len(off) != 1 else ''}: "
            f"{_few([f'{label} {fmt.signed_pct(g)}' for label, g in off], len(off))}."
        )
    return out


def speed_line(rec: Recommendation) -> str | None:
    """'fastest that fits: zero2, 1,024 tokens/s; the next, ddp, -3.8% (95% interval -6.4% ..
    -1.3%)', or, on a tie, 'fastest that fits: fsdp, zero2 and ddp are tied on speed (within their
    +-8.2%, +-8.7% and +-8.8% intervals); fsdp is chosen for its lower peak memory (10.0 GB)'.
    None where fewer than two configurations fit: there is nothing to rank."""
    f, rank = rec.fastest, rec.speed
    if f is None or rank is None or len(rank.order) < 2:
        return None
    if rank.is_tie:
        chosen = (
            f"{f.strategy} is chosen for its lower peak memory ({fmt.gb(f.memory_gb)} GB)"
            if rec.chosen_for == "lower peak memory"
            else f"{f.strategy} is named, the {rec.chosen_for}"
        )
        head = f"{rank.tie_phrase(lambda c: c.strategy)}; {chosen}"
    else:
        head = f"{f.strategy}, {fmt.tokens(f.tokens_per_sec)} tokens/s"
    after = rank.first_untied()
    if after is not None:
        head += f"; {after.strategy} {rank.gap(after).change()} against {rank.top.strategy}"
    return f"fastest that fits: {head}"


def speed_lines(recs: Sequence[Recommendation]) -> list[str]:
    """One speed_line per scenario that has one, titled by its scenario where there are several."""
    lines = [(rec, line) for rec in recs if (line := speed_line(rec))]
    if len(lines) == 1:
        return [lines[0][1]]
    return [f"{rec.title}: {line}" for rec, line in lines]


def summary_table(
    configs: Sequence[Config],
    scaling: Mapping[ConfigKey, Scaling],
    recommendations: Sequence[Recommendation] = (),
) -> str:
    """The console table, with its header line, the fastest that fits per scenario (given the
    recommendations) and the notes, as one string."""
    headers, rows, fixed = summary_rows(configs, scaling)
    text = tabulate(
        rows, headers=headers, tablefmt="simple", disable_numparse=True, colalign=fmt.colalign(headers)
    )
    lines = []
    if fixed:
        lines.append("; ".join(fixed))
    lines.append(text)
    lines.extend(speed_lines(recommendations))
    lines.extend(notes(configs))
    return "\n".join(lines)
