"""summary/BENCHMARK_REPORT.md: the recommendation first, then the evidence.

Order: what to train with (per scenario), the table, scaling with the baseline each number is
measured against, MFU (or why there is none), what each technique buys (markdown_techniques.py),
what the GPU measurements say (memory against its prediction, where the step's time goes, GPU
health: markdown_gpu.py), the validation checks (markdown_checks.py: how each went, then every
failure), runs that did not finish, files that could not be read, the plots. Long lists are cut at
md_table.LIST_LIMIT entries; metrics.csv has them all.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .. import fmt
from ..configs import Config, ConfigKey, scenario_title, sessions_read
from ..scaling import LOSS_NOTES, baseline_cell, loss_cells
from . import (
    markdown_checks,
    markdown_gpu,
    markdown_scale,
    markdown_settings,
    markdown_techniques,
    markdown_workloads,
)
from .md_table import capped as _capped
from .md_table import md_table as _md_table
from .table import CPU_NOTE, summary_rows

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from ..collect import Collection, Run
    from ..scaling import Scaling
    from .recommend import Recommendation


def _header(collection: Collection, configs: Sequence[Config]) -> list[str]:
    n = len(collection.runs)
    older = (
        f" (and {collection.older_runs} older sessions' run{'s' if collection.older_runs != 1 else ''} "
        "of the same configurations, left out below)"
        if collection.older_runs
        else ""
    )
    out = [
        "# Benchmark report",
        "",
        f"{n} result file{'s' if n != 1 else ''} read under `{collection.root}`{older}, {len(configs)} "
        f"configuration{'s' if len(configs) != 1 else ''}; generated {time.strftime('%Y-%m-%d %H:%M:%S')}.",
    ]
    sessions = sessions_read(collection.runs)
    if sessions:
        out.append(f"Read from {sessions}.")
    if collection.problems:
        out.append(
            f"{len(collection.problems)} result file(s) could not be read and are left out "
            "(listed under *Unreadable result files*)."
        )
    if collection.left_out:
        out += [
            "",
            f"> {len(collection.left_out)} configuration(s) ran in more than one session here; each is read "
            "from its newest session only (runs of separate sessions are not repeats):",
            *[f"> - {line}" for line in collection.left_out],
        ]
    commits = collection.commits
    if len(commits) > 1:
        out += [
            "",
            f"> These runs come from {len(commits)} commits ({', '.join(commits[:5])}"
            f"{', ...' if len(commits) > 5 else ''}): a configuration run in several sessions is read from "
            "its newest (results written before sessions were named are averaged across them). To see "
            "one commit alone, report a fresh results folder.",
        ]
    compiled = sum(bool(r.data.get("compile")) for r in collection.runs)
    if compiled:
        # configurations are keyed without `compile`: a compiled and an eager run of one setup merge
        out += [
            "",
            "All runs used torch.compile."
            if compiled == n
            else f"> {compiled} of {n} runs used torch.compile, the others ran eagerly; a configuration run "
            "both ways is averaged as if repeated (the `compile` column of metrics.csv tells them apart).",
        ]
    out += _shared_node(collection.runs)
    if collection.any_cpu:
        cpu = sum(r.is_cpu for r in collection.runs)
        out += [
            "",
            f"> **{CPU_NOTE}** ({cpu} of {n} runs ran on CPU; their memory is host RSS, not GPU memory.)",
        ]
    return out


def _shared_node(runs: Sequence[Run]) -> list[str]:
    """Which runs shared the node while they trained: side by side on lanes (each on its own GPUs
    and cores) or under pytest-xdist, and which ran alone where others could have shared."""
    lanes = [r for r in runs if (r.data.get("side_by_side") or {}).get("beside")]
    alone = [r for r in runs if (r.data.get("side_by_side") or {}).get("alone")]
    xdist = [r for r in runs if r.data.get("node_shared")]
    if not (lanes or xdist):
        return []
    out = [""]
    if lanes:
        most = max(int(r.data["side_by_side"]["lanes"]) for r in lanes)
        out.append(
            f"> {len(lanes)} of {len(runs)} runs trained side by side, up to {most} at once, each on its own "
            "lane: its GPUs and its ranks' share of the host's cores (result.json's `side_by_side` "
            "names the runs beside each)"
            + (f"; {len(alone)} had the node to itself ({_reasons(alone)})." if alone else ".")
        )
    if xdist:
        out.append(f"> {len(xdist)} runs ran in pytest-xdist workers that shared the node (`node_shared`).")
    return out


def _reasons(runs: Sequence[Run]) -> str:
    reasons = sorted({str(r.data["side_by_side"]["alone"]).split(":")[0] for r in runs})
    return ", ".join(reasons)


def _trade(rec: Recommendation) -> str:
    """The most memory-frugal configuration against the pick: what its memory saving costs in
    throughput, where the measurements can tell (ranking.py), else that they cannot."""
    f, m = rec.fastest, rec.frugal
    if f and m is f:
        return "the fastest is also the leanest"
    if not (f and m and f.memory_gb and m.memory_gb and f.tokens_per_sec and m.tokens_per_sec):
        return fmt.NA
    less = f"{m.strategy}: {fmt.pct(1 - m.memory_gb / f.memory_gb, 0)} less memory, "
    if rec.speeds is not None and rec.speeds.gap(f, m).tied:
        return less + "throughput tied within the noise"
    return less + f"{fmt.pct(1 - m.tokens_per_sec / f.tokens_per_sec, 0)} less throughput"


def _pick_cell(rec: Recommendation) -> str:
    """'zero2', or on a tie 'fsdp (tied with zero2, ddp; lower peak memory)'."""
    f = rec.fastest
    if f is None:
        return "none fits" if rec.not_fitting else "none finished"
    others = [c.strategy for c in rec.tied if c is not f]
    return f"{f.strategy} (tied with {', '.join(others)}; {rec.chosen_for})" if others else f.strategy


def _at_a_glance(recs: Sequence[Recommendation]) -> list[str]:
    """One row per scenario: the pick and the memory trade-off, details in the sections below.
    Where configurations are tied for the fastest, the pick is the leanest of them, and says so."""
    rows = []
    for rec in recs:
        f = rec.fastest
        trade = _trade(rec)
        rows.append(
            [
                rec.title,
                _pick_cell(rec),
                fmt.tokens(f.tokens_per_sec) if f else fmt.NA,
                f"{fmt.gb(f.memory_gb)} GB" if f and f.memory_gb is not None else fmt.NA,
                trade,
                len(rec.not_fitting) or "",
            ]
        )
    headers = ["scenario", "fastest that fits", "tokens/s", "its peak", "most memory-frugal", "did not fit"]
    return ["", "## At a glance", "", _md_table(headers, rows)]


def _recommendations(recs: Sequence[Recommendation]) -> list[str]:
    out = ["", "## Recommendation"]
    for rec in recs:
        out += ["", f"### {rec.title}", ""]
        out += [f"- {s}" for s in rec.sentences()]
        spreads = rec.spread_sources()
        if spreads:
            out.append(f"- The spread between sessions is from {'; '.join(spreads)}.")
        searched = markdown_workloads.batch_sentence([r for c in rec.configs for r in c.runs])
        if searched:
            out.append(f"- {searched}")
        if rec.findings:
            out += ["- Patterns in these results:"]
            out += [f"  - {f.line()}" for f in rec.findings]
    return out


def _results(configs: Sequence[Config], scaling: Mapping[ConfigKey, Scaling]) -> list[str]:
    headers, rows, fixed = summary_rows(configs, scaling)
    out = ["", "## Results", ""]
    if fixed:
        out += ["All runs: " + "; ".join(fixed) + ".", ""]
    out.append(_md_table(headers, rows))
    out += [
        "",
        "tokens/s and step time are means over the measured steps (and over repeats of a configuration); "
        "CV is the step-time coefficient of variation; peak memory is per rank.",
    ]
    return out


def _scaling(configs: Sequence[Config], scaling: Mapping[ConfigKey, Scaling]) -> list[str]:
    out = [
        "",
        "## Scaling",
        "",
        "Efficiency = T(N) / (N x T(1)) against a measured 1-GPU run of the same configuration; without "
        "one, T(N) / ((N/N0) x T(N0)) against the smallest world size N0 measured. *Weak* scaling keeps "
        "the per-device batch fixed (the global batch grows with N); *strong* scaling keeps the global "
        "batch (world size x batch x grad accumulation) fixed.",
        "",
    ]
    rows = []
    for c in configs:
        s = scaling.get(c.key)
        if s is None or s.is_baseline(c):
            continue
        rows.append(
            [
                c.strategy,
                f"{c.key.model} seq{c.key.seq_len} b{c.key.per_device_batch}x{c.key.grad_accum} "
                f"{c.key.hardware}",
                c.world_size,
                fmt.tokens(c.tokens_per_sec),
                fmt.pct(s.efficiency, 0),
                s.mode,
                *loss_cells(c, s),
                baseline_cell(c, s),
            ]
        )
    if not rows:
        out.append("Every configuration was measured at one world size only: nothing to scale against.")
        return out
    headers = ["strategy", "configuration", "world size", "tokens/s", "efficiency", "mode"]
    out.append(_md_table([*headers, "lost per step: comm / wait / host / other", "mostly", "baseline"], rows))
    out += ["", *LOSS_NOTES]
    return out


def _mfu(configs: Sequence[Config]) -> list[str]:
    out = [
        "",
        "## MFU",
        "",
        "MFU = achieved FLOPs / the GPU's peak dense FLOPs (FLOPs per token 6N + 12LHQT, PaLM).",
    ]
    known = [c for c in configs if c.mfu is not None]
    reasons: dict[str, list[Config]] = {}
    for c in configs:
        if c.mfu is None:
            reasons.setdefault(c.mfu_reason or "not recorded", []).append(c)
    if known:
        rows = [
            [c.strategy, c.world_size, scenario_title(c.key), fmt.tokens(c.tokens_per_sec), fmt.mfu(c.mfu)]
            for c in known
        ]
        out += ["", _md_table(["strategy", "world size", "scenario", "tokens/s", "MFU"], rows)]
    for reason, cs in reasons.items():
        names = ", ".join(c.label() for c in cs[:12]) + (f" and {len(cs) - 12} more" if len(cs) > 12 else "")
        out += ["", f"No MFU for {names}: {reason}."]
    return out


def _unfinished(runs: Sequence[Run]) -> list[str]:
    lines = []
    for r in runs:
        if r.status == "ok":
            continue
        if r.running_note:
            # a "running" result: its session is alive, or was killed and left it (results/liveness.py)
            state = r.data.get("running_state") or {}
            lines.append(f"- `{r.name}`: **{r.running_note}**; {state.get('why')}")
            continue
        ranks = r.data.get("failed_ranks") or []
        where = f" on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" if ranks else ""
        lines.append(f"- `{r.name}`: **{r.status}**{where}" + (f": {r.error_line}" if r.error_line else ""))
    out = ["", "## Runs that did not finish (OOM, error, interrupted, unfinished)", ""]
    if any(r.status == "unfinished" for r in runs):
        out += [
            "*Unfinished*: the session that ran it ended without a word (SIGKILL, the OOM killer, a "
            "scheduler's time limit), so nothing says how it would have gone; it is no verdict on "
            "memory. Run the configuration again.",
            "",
        ]
    return out + (_capped(lines, "runs") if lines else ["Every run finished."])


def _problems(collection: Collection) -> list[str]:
    if not collection.problems:
        return []
    return ["", "## Unreadable result files", "", *_capped([f"- {p}" for p in collection.problems], "files")]


def _plots(plot_paths: Sequence[Path], plot_note: str | None, out_dir: Path) -> list[str]:
    out = ["", "## Plots", ""]
    if plot_note:
        out.append(plot_note)
    for p in plot_paths:
        rel = p.relative_to(out_dir) if p.is_relative_to(out_dir) else p
        out += [f"![{p.stem}]({rel.as_posix()})", ""]
    return out


def render(
    collection: Collection,
    configs: Sequence[Config],
    scaling: Mapping[ConfigKey, Scaling],
    recs: Sequence[Recommendation],
    plot_paths: Sequence[Path],
    plot_note: str | None,
    out_dir: Path,
) -> str:
    runs = collection.runs
    parts = [
        *_header(collection, configs),
        *_at_a_glance(recs),
        *_recommendations(recs),
        *_results(configs, scaling),
        *_scaling(configs, scaling),
        *markdown_scale.render(runs, out_dir),
        *_mfu(configs),
        *markdown_techniques.render(configs),
        *markdown_settings.settings(configs),
        *markdown_settings.stragglers(runs),
        *markdown_gpu.render(configs, runs),
        *markdown_workloads.diagnostic(runs),
        *markdown_workloads.batch_search(runs),
        *markdown_workloads.encoder_decoder(runs),
        *markdown_checks.render(runs),
        *_unfinished(runs),
        *_problems(collection),
        *_plots(plot_paths, plot_note, out_dir),
        "",
        "How to read this report, compare machines and prices, and gate CI: docs/reports.md in llmbench.",
        "",
    ]
    return "\n".join(parts)
