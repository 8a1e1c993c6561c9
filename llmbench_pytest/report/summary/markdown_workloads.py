"""Report sections for the other workloads: the LoRA fine-tuning guide's diagnostic matrix, the
batch search, and the encoder-decoder benchmark's epochs (memory against disk).

Standard library and tabulate (through md_table). Sections are absent when no run carries the data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...analysis.significance import IMPROVED
from ...analysis.stats import mean_of
from .. import fmt
from ..evidence import per_sample
from ..records import record_from_result
from .md_table import md_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..collect import Run

WORKED = 1.05
"""A variant 'worked' when the speed decision finds it more than 5% faster than the baseline in
samples/s (the LoRA fine-tuning guide's table reports speed-ups in samples/s), against the spread
between sessions: a larger speed-up inside that noise is not claimed."""

_KNOBS = ("seq_len", "per_device_batch", "optimizer", "lora_rank", "dtype")


def _group(run: Run) -> tuple[Any, ...]:
    d = run.data
    return (d.get("model"), d.get("strategy"), d.get("world_size"), run.hardware, d.get("workload"))


def _change(base: dict[str, Any], d: dict[str, Any]) -> str:
    names = {"seq_len": "seq", "per_device_batch": "batch", "lora_rank": "LoRA r"}
    parts = [f"{names.get(k, k)} {base.get(k)} -> {d.get(k)}" for k in _KNOBS if d.get(k) != base.get(k)]
    return ", ".join(parts) or "-"


def _worked(base: Run, variant: Run) -> bool:
    """The speed decision: the variant's time per sample is below the baseline's by more than
    WORKED allows, outside the spread between sessions (evidence.per_sample)."""
    a, b = (record_from_result(r.data, str(r.path)) for r in (base, variant))
    if not (a.step_time and b.step_time and a.samples_per_sec and b.samples_per_sec):
        return False
    return per_sample(a, b, 1 - 1 / WORKED).verdict == IMPROVED


def diagnostic(runs: Sequence[Run]) -> list[str]:
    """The LoRA fine-tuning guide's diagnostic matrix: each variant's speed-up over its baseline,
    and what worked."""
    groups: dict[tuple[Any, ...], dict[str, Run]] = {}
    for run in runs:
        variant = run.data.get("diagnostic")
        if variant:
            groups.setdefault(_group(run), {})[variant] = run  # the last repeat of a variant stands
    if not groups:
        return []
    out = [
        "",
        "## Diagnostic matrix (LoRA fine-tuning)",
        "",
        "Each variant changes one knob of the baseline (the fifth two); its speed-up in samples/s says "
        f"whether that knob limits the run. A variant more than {WORKED:.2f}x as fast, outside the noise "
        "between sessions, *worked*.",
    ]
    for (model, strategy, ws, hardware, workload), variants in groups.items():
        base_run = variants.get("baseline")
        out += ["", f"### {strategy}, {model} ({workload}) on {ws}x {hardware}", ""]
        if base_run is None:
            out.append("No baseline run among these results: speed-ups cannot be computed.")
            continue
        base = dict(base_run.data)
        base_rate = base.get("samples_per_sec")
        rows, worked, did_not = [], [], []
        for name, run in variants.items():
            d = dict(run.data)
            rate = d.get("samples_per_sec")
            speedup = rate / base_rate if rate and base_rate else None
            rows.append(
                [
                    name,
                    _change(base, d),
                    fmt.tokens(rate),
                    fmt.tokens(d.get("tokens_per_sec")),
                    fmt.ratio(speedup),
                    fmt.gb(d.get("peak_vram_gb") or d.get("peak_host_rss_gb")),
                    fmt.money(d.get("cost_per_1k_samples_usd")),
                    run.status,
                ]
            )
            if name == "baseline":
                continue
            line = f"{name} ({_change(base, d)})"
            if run.status != "ok":
                did_not.append(f"{line}: {run.status}")
            elif speedup is not None and _worked(base_run, run):
                worked.append(f"{line}: {speedup:.2f}x")
            elif speedup is not None and speedup >= WORKED:
                did_not.append(f"{line}: {speedup:.2f}x, not told from the noise between sessions")
            else:
                did_not.append(f"{line}: {speedup:.2f}x" if speedup else line)
        headers = [
            "variant",
            "change",
            "samples/s",
            "tokens/s",
            "speed-up",
            "peak GB",
            "$/1K samples",
            "status",
        ]
        out += [md_table(headers, rows), ""]
        out += ["| what worked | what did not |", "|---|---|"]
        for i in range(max(len(worked), len(did_not), 1)):
            a = worked[i] if i < len(worked) else ("nothing" if i == 0 else "")
            b = did_not[i] if i < len(did_not) else ("nothing" if i == 0 else "")
            out.append(f"| {a} | {b} |")
    return out


def batch_search(runs: Sequence[Run]) -> list[str]:
    """--llmbench-find-batch: the largest batch that fit and the fastest, per strategy."""
    searched = [r for r in runs if r.data.get("batch_search")]
    if not searched:
        return []
    rows = []
    for run in searched:
        d = run.data
        s = d["batch_search"]
        fit = s.get("max_fitting_batch")
        trials = ", ".join(_trial(t) for t in s.get("trials", []))
        rows.append(
            [
                d.get("strategy"),
                d.get("world_size"),
                f"{fit}{' (the largest tried)' if s.get('capped') else ''}" if fit else "none",
                s.get("best_batch") or "-",
                fmt.tokens(s.get("best_tokens_per_sec")),
                trials,
            ]
        )
    headers = ["strategy", "ranks", "largest batch that fits", "fastest batch", "its tokens/s", "trials"]
    return [
        "",
        "## Batch search",
        "",
        "Per-device batches tried by --llmbench-find-batch (short runs), doubling then bisecting; the "
        "run in the results trained at the fastest. A batch fits when its trial finished under the "
        "memory limit.",
        "",
        md_table(headers, rows),
    ]


def _trial(t: dict[str, Any]) -> str:
    if t["fits"]:
        return str(t["batch"])
    return f"{t['batch']} ({t['status'] if t['status'] != 'ok' else 'over the limit'})"


def batch_sentence(runs: Sequence[Run]) -> str | None:
    """One line for a scenario's recommendation when its runs searched their batch."""
    parts = []
    for run in runs:
        s = run.data.get("batch_search")
        if s and s.get("best_batch"):
            parts.append(
                f"{run.strategy}: fastest at batch {s['best_batch']} "
                f"({fmt.tokens(s.get('best_tokens_per_sec'))} tokens/s), "
                f"fits up to {s.get('max_fitting_batch')}"
            )
    return "batch search: " + "; ".join(parts) if parts else None


def _epoch_group(run: Run) -> tuple[Any, ...]:
    """Everything of the run's configuration but where its data came from: runs that share it
    differ only by memory against disk."""
    config = dict((run.data.get("config") or {}).get("run") or {})
    for key in ("data", "data_dir", "diagnostic"):
        config.pop(key, None)
    return (run.hardware, *sorted((k, repr(v)) for k, v in config.items()))


def _data_cell(d: dict[str, Any]) -> str:
    src = d.get("data_source") or {}
    if d.get("data") != "disk":
        return "memory"
    shards = src.get("shards")
    size = (src.get("bytes") or 0) / 1e6
    reused = " reused" if src.get("reused") else ""
    cold = ", cache dropped" if src.get("page_cache_drop_requested") else ""
    mb = f"{size:,.1f}" if size >= 1 else f"{size:.2g}"
    return f"disk: {shards} shard(s), {mb} MB{reused}{cold}"


def _disk_cost(memory: list[Run], disk: list[Run]) -> list[str]:
    """One line: disk against memory for a configuration, over the means of its repeats, with
    the repeats' spread where there are several, so a difference inside the noise shows as such."""
    fast = [r.data["epoch_samples_per_sec"] for r in memory if r.data.get("epoch_samples_per_sec")]
    slow = [r.data["epoch_samples_per_sec"] for r in disk if r.data.get("epoch_samples_per_sec")]
    if not fast or not slow:
        return []
    mean_fast, mean_slow = mean_of(fast) or 0.0, mean_of(slow) or 0.0
    repeats = ""
    if len(fast) > 1 or len(slow) > 1:
        spreads = [
            f"{fmt.pct((max(xs) - min(xs)) / (mean_of(xs) or 1.0))} ({source})"
            for source, xs in (("disk", slow), ("memory", fast))
            if len(xs) > 1
        ]
        repeats = f"; means of {len(slow)} and {len(fast)} runs; fastest and slowest differ by "
        repeats += " and ".join(spreads)
    idle = [mean_of(r.data.get("idle_fraction") for r in runs) for runs in (disk, memory)]
    d = disk[-1]
    return [
        f"- {d.data.get('strategy')}, {d.data.get('model')} on {d.data.get('world_size')}x {d.hardware}: "
        f"from disk {fmt.tokens(mean_slow)} samples/s against {fmt.tokens(mean_fast)} from memory "
        f"({fmt.signed_pct(mean_slow / mean_fast - 1)} over the epoch's wall clock{repeats}); no step "
        f"running {fmt.pct(idle[0])} of the epoch against {fmt.pct(idle[1])}."
    ]


def encoder_decoder(runs: Sequence[Run]) -> list[str]:
    """The encoder-decoder benchmark's epochs: wall time, throughput over the wall clock, time
    waiting for data, and what reading from disk cost against the same configuration in memory."""
    epoch_runs = [r for r in runs if r.data.get("epochs") and r.status == "ok"]
    if not epoch_runs:
        return []
    rows, costs = [], []
    groups: dict[tuple[Any, ...], dict[str, list[Run]]] = {}
    for run in epoch_runs:
        d = dict(run.data)
        groups.setdefault(_epoch_group(run), {}).setdefault(str(d.get("data")), []).append(run)
        rows.append(
            [
                d.get("model"),
                d.get("strategy"),
                d.get("world_size"),
                _data_cell(d),
                len(d["epochs"]),
                fmt.seconds(d.get("epoch_wall_sec_mean")),
                fmt.tokens(d.get("epoch_samples_per_sec")),
                fmt.tokens(d.get("samples_per_sec")),
                fmt.pct(d.get("idle_fraction")),
                f"{fmt.seconds(d.get('data_wait_sec_per_epoch'))} ({fmt.pct(d.get('data_wait_fraction'))})",
                fmt.gb(d.get("peak_vram_gb") or d.get("peak_host_rss_gb")),
                fmt.whole(d.get("gpu_util_pct")),
            ]
        )
    for pair in groups.values():
        memory, disk = pair.get("memory"), pair.get("disk")
        if memory and disk:
            costs.extend(_disk_cost(memory, disk))
    headers = [
        "model",
        "strategy",
        "ranks",
        "data",
        "epochs",
        "epoch wall s",
        "samples/s (epoch)",
        "samples/s (steps)",
        "no step running",
        "host data wait s/epoch (share)",
        "peak GB",
        "GPU util %",
    ]
    return [
        "",
        "## Encoder-decoder epochs",
        "",
        "Measured epochs after the warm-up ones. *samples/s (epoch)* divides the samples by the epoch's "
        "wall clock; *samples/s (steps)* counts the training steps alone. *No step running* is the "
        "share of the wall clock outside the steps (on a GPU: the device idle between steps), which "
        "is what waiting for data really cost; the host's wait for the DataLoader is shown beside it "
        "(on a GPU it can overlap queued work and cost nothing). Disk runs read numbered shards, the "
        "page cache dropped before each epoch.",
        "",
        md_table(headers, rows),
        *(["", "What the disk path costs against memory:", "", *costs] if costs else []),
    ]
