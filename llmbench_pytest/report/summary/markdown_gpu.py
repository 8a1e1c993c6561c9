"""BENCHMARK_REPORT.md's sections on what the GPU measurements say.

- *Memory: measured vs predicted*: the model-state census against the ZeRO paper, flagged runs;
- *Where the time goes*: time in collectives and its exposed part, bus volume and bus GB/s,
  host-to-device GB/s against the link's, and whether CUDA events agree with the host clock;
- *GPU health during the runs*: utilisation, power, clocks; the power cap (normal at the power
  limit) said once, and a line for every run that needs attention (thermal, hardware slowdown).

One table row per configuration (repeats averaged, as in *Results*), one line per run for what
needs naming. A section with nothing to show is its heading and one line. Readings: gpu_truth.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...analysis.memory_model import GAP_FLAG
from ...analysis.peak_model import PEAK_TOLERANCE
from .. import fmt, gpu_truth
from ..configs import Config, strategy_rank
from ..gpu_truth import config_comm, config_extreme, config_throttles
from .md_table import capped, md_table
from .table import lead_columns, memory_header

if TYPE_CHECKING:
    from ..collect import Run

Cell = Callable[[Config], Any]
Column = tuple[str, Cell]


def _table(shown: Sequence[Config], every: Sequence[Config], columns: Sequence[Column]) -> list[str]:
    """Varying scenario columns first (as in Results), then strategy, world size, then `columns`.
    Where the rows are a subset whose common setup differs from the report's, a line says it."""
    lead, fixed = lead_columns(shown)
    gpus = "ranks" if any(c.is_cpu for c in shown) else "GPUs"
    cols: list[Column] = [*lead, ("strategy", lambda c: c.strategy), (gpus, lambda c: c.world_size), *columns]
    out = [md_table([h for h, _ in cols], [[get(c) for _, get in cols] for c in shown])]
    if fixed and fixed != lead_columns(every)[1]:
        out = ["These rows: " + "; ".join(fixed) + ".", "", *out]
    return out


def _names(cs: Sequence[Config], limit: int = 12) -> str:
    names = ", ".join(c.label() for c in cs[:limit])
    return names + (f" and {len(cs) - limit} more" if len(cs) > limit else "")


def _strategies(cs: Sequence[Config]) -> str:
    return ", ".join(sorted({c.strategy for c in cs}, key=strategy_rank))


# ---- memory -------------------------------------------------------------------------------------


def _no_prediction_reason(c: Config) -> str:
    if c.strategy.startswith("zero3") and gpu_truth.is_offload(c.runs[0].data):
        return "ZeRO-3 offload streams parameters in from host memory, so there is no steady device share"
    return "memory_model.py has no formula for this strategy"


def _gap_cell(c: Config) -> str:
    g = c.mean("model_state_gap")
    if g is None:
        return fmt.NA
    return f"**{fmt.signed_pct(g)}**" if abs(g) > GAP_FLAG else fmt.signed_pct(g)


def _peak_gap_cell(c: Config) -> str:
    g = c.mean("peak_prediction_gap")
    if g is None or c.is_cpu:
        return fmt.NA  # on a CPU the measured peak is the process's RSS: no like-for-like gap
    return f"**{fmt.signed_pct(g)}**" if abs(g) > PEAK_TOLERANCE else fmt.signed_pct(g)


def memory_section(configs: Sequence[Config], runs: Sequence[Run]) -> list[str]:
    out = ["", "## Memory: measured vs predicted", ""]
    shown = [
        c for c in configs if c.model_state_gb is not None or c.mean("model_state_predicted_gb") is not None
    ]
    if not shown:
        return [*out, "Not recorded: these result files have no model-state census."]
    any_host = any(c.mean("model_state_host_gb") is not None for c in shown)
    cpu = sum(c.is_cpu for c in shown)
    device = "GPU" if not cpu else "CPU" if cpu == len(shown) else "GPU (host memory on CPU runs)"
    out.append(
        "Model states (weights, gradients, optimizer state) per rank at the end of backward: *measured* by "
        f"a census of the live tensors on the {device}"
        + ("; *host*: those in host memory, where offload keeps the optimizer state" if any_host else "")
        + "; *predicted* from the ZeRO paper's bytes per parameter for the strategy (memory_model.py; "
        "each run's model_states check holds the two within 5%). "
        f"*Gap* = measured / predicted - 1, **bold** beyond ±{GAP_FLAG:.0%}. The peak is the whole step's, "
        "activations included; *peak predicted* is the whole step's predicted before the run (llmbench "
        f"plan's model, for a GPU), its gap **bold** beyond ±{PEAK_TOLERANCE:.0%} (none on a CPU)."
    )
    columns: list[Column] = [("measured GB", lambda c: fmt.gb(c.model_state_gb))]
    if any_host:
        columns.append(("host GB", lambda c: fmt.gb(c.mean("model_state_host_gb"))))
    columns += [
        ("predicted GB", lambda c: fmt.gb(c.mean("model_state_predicted_gb"))),
        ("gap", _gap_cell),
        (memory_header(shown)[0], lambda c: fmt.gb(c.memory_gb)),
    ]
    if any(
        c.mean("peak_predicted_gb") is not None for c in shown
    ):  # results older than the prediction lack it
        columns += [
            ("peak predicted GB", lambda c: fmt.gb(c.mean("peak_predicted_gb"))),
            ("peak gap", _peak_gap_cell),
        ]
    out += ["", *_table(shown, configs, columns)]
    flagged = [r for r in runs if r.ok and r.data.get("model_state_flag")]
    if flagged:
        out += [
            "",
            f"Flagged, more than {GAP_FLAG:.0%} off: the strategy keeps its states differently from the "
            "paper's accounting (its settings are under `strategy_config` in result.json), or the census "
            "counted tensors it should not, or missed some.",
            "",
            *capped([f"- `{r.name}`: {r.data['model_state_flag']}." for r in flagged], "flagged runs"),
        ]
    elif any(c.mean("model_state_gap") is not None for c in shown):
        out += ["", f"Every run with a prediction is within ±{GAP_FLAG:.0%} of it."]
    unpredicted: dict[str, list[Config]] = {}
    for c in shown:
        if c.mean("model_state_predicted_gb") is None:
            unpredicted.setdefault(_no_prediction_reason(c), []).append(c)
    for reason, cs in unpredicted.items():
        out += ["", f"No prediction for {_names(cs)} ({reason})."]
    return out


# ---- time ---------------------------------------------------------------------------------------


def _with_share(seconds: float | None, share: float | None) -> str:
    if seconds is None:
        return fmt.NA
    return fmt.ms(seconds) + (f" ({fmt.pct(share)})" if share is not None and seconds else "")


def _bus_gb(c: Config) -> str:
    b = config_comm(c, "bus_bytes_per_step")
    return fmt.NA if b is None else "0" if b == 0 else fmt.gb(b / 1e9)


def _link_used(c: Config) -> str:
    h2d, link = c.h2d_gbps, c.mean("h2d_link_gbps")
    return fmt.pct(h2d / link) if h2d is not None and link else fmt.NA


def _comm_columns(comm: Sequence[Config], exposed: bool) -> list[Column]:
    cols: list[Column] = [
        (
            "in collectives (share)",
            lambda c: _with_share(
                config_comm(c, "comm_sec_per_step"), config_comm(c, "comm_fraction_of_step")
            ),
        )
    ]
    if exposed:
        cols.append(
            (
                "exposed (share)",
                lambda c: _with_share(
                    config_comm(c, "comm_exposed_sec_per_step"), config_comm(c, "exposed_fraction_of_step")
                ),
            )
        )
    return [
        *cols,
        ("collectives", lambda c: _count(config_comm(c, "collectives_per_step"))),
        ("mean message", lambda c: _mb(config_comm(c, "mean_message_bytes"))),
        ("bus GB/step", _bus_gb),
        ("bus GB/s", lambda c: fmt.gbps(config_comm(c, "bus_gbps"))),
        ("of link busbw", _link_share),
    ]


def _count(x: float | None) -> str:
    return fmt.NA if x is None else f"{x:.0f}"


def _mb(x: float | None) -> str:
    return fmt.NA if x is None else f"{x / 1e6:.2f} MB"


def _link_share(c: Config) -> str:
    """The achieved bus GB/s as a share of the link probe's at the step's mean message size."""
    used, at = config_comm(c, "link_used"), config_comm(c, "link_busbw_gbps")
    return fmt.NA if used is None or at is None else f"{fmt.pct(used)} of {fmt.gbps(at)}"


def link_section(configs: Sequence[Config]) -> list[str]:
    """The link probe's sweep per world size (worker/link_probe.py): what the GPUs' link delivers,
    the yardstick of every achieved bus GB/s above."""
    sweeps: dict[int, dict[str, Any]] = {}
    for c in configs:
        for r in c.ok_runs:
            link = r.data.get("link")
            if isinstance(link, dict) and link.get("world_size"):
                sweeps.setdefault(int(link["world_size"]), link)
    if not sweeps:
        return []
    kinds = ("all_reduce", "all_gather", "reduce_scatter")
    rows = []
    for ws, link in sorted(sweeps.items()):
        for kind in kinds:
            table = link.get(kind) or {}
            by_size = {int(r["bytes"]): r.get("busbw_gbps") for r in table.get("sizes") or []}
            cells = [fmt.gbps(by_size.get(size)) for size in _PROBE_SIZES]
            hidden = ((link.get("overlap") or {}).get(kind) or {}).get("hidden_share")
            rows.append(
                [ws, kind, _us(table.get("latency_us")), *cells, fmt.gbps(table.get("peak_busbw_gbps")),
                 fmt.NA if hidden is None else fmt.pct(hidden)]
            )  # fmt: skip
    sizes = [f"busbw {_size_name(b)}" for b in _PROBE_SIZES]
    first = next(iter(sweeps.values()))
    cpu = any(c.is_cpu for c in configs)
    return [
        "",
        f"### The link between the {'ranks (gloo, on this CPU)' if cpu else 'GPUs'}",
        "",
        "Measured by each group of ranks before its first configuration (or kept from an earlier sweep on "
        "the same boot of this host), as nccl-tests measures it: bf16, the mean over ranks of the mean of "
        f"{first.get('iterations')} iterations; busbw = S / t x the collective's bus factor "
        "(nccl-tests' PERFORMANCE.md). *Latency*: the time of an 8 KiB message. *Of link busbw* above is a "
        "run's bus GB/s against this busbw at the run's mean message size. *Hidden by compute*: the share of "
        "a train of collectives (64 MiB each on a GPU) that matrix multiplies started beside it hid, "
        "(compute alone + collectives alone - both) / the shorter of the two; the rest slows a step even "
        "where its profile shows the collectives beside compute, and the scale prediction charges it.",
        "",
        md_table(
            ["ranks" if cpu else "GPUs", "collective", "latency", *sizes, "peak GB/s", "hidden by compute"],
            rows,
        ),
    ]


_PROBE_SIZES = (1 << 20, 64 << 20, 1 << 30)


def _size_name(b: int) -> str:
    return f"{b >> 30} GiB" if b >= 1 << 30 else f"{b >> 20} MiB"


def _us(x: float | None) -> str:
    return fmt.NA if x is None else f"{x:.0f} us"


def _most_exposed(comm: Sequence[Config]) -> list[str]:
    exposed = [(f, c) for c in comm if (f := config_comm(c, "exposed_fraction_of_step"))]
    if not exposed:
        return []
    f, c = max(exposed, key=lambda x: x[0])
    return [
        "",
        f"Most exposed: {c.label()} waits {fmt.ms(config_comm(c, 'comm_exposed_sec_per_step'))} per step for "
        f"collectives no computation hides ({fmt.pct(f)} of its step).",
    ]


def _by_at_most(x: float) -> str:
    """Timing gaps are hundredths of a percent when all is well: two decimals, no '-0.00%'."""
    return "by less than 0.01%" if abs(x) < 0.0001 else f"by at most {x:+.2%}"


def _timing_line(runs: Sequence[Run]) -> list[str]:
    gaps = [
        (g, r)
        for r in runs
        if r.ok
        and r.device == "cuda"
        and (g := (r.data.get("timing") or {}).get("events_vs_clock")) is not None
    ]
    if not gaps:
        return []
    worst, run = max(gaps, key=lambda x: abs(x[0]))
    failed = sum(any(c.get("name") == "timing_agreement" for c in r.failed_checks) for _, r in gaps)
    line = (
        f"Step timing: CUDA events summed over the measured steps and the host clock around them differ "
        f"{_by_at_most(worst)} (`{run.name}`) over {len(gaps)} GPU "
        f"run{'s' if len(gaps) != 1 else ''}"
    )
    if failed:
        line += (
            f"; {failed} beyond the timing_agreement check's limit (see *Failed validation checks*): time "
            "passed between steps that no step accounts for"
        )
    return ["", line + "."]


def time_section(configs: Sequence[Config], runs: Sequence[Run]) -> list[str]:
    out = ["", "## Where the time goes", ""]
    comm = [c for c in configs if config_comm(c, "comm_sec_per_step") is not None]
    h2d = [c for c in configs if c.h2d_gbps is not None or c.mean("h2d_link_gbps") is not None]
    measured = {id(c) for c in (*comm, *h2d)}  # by identity: Config equality compares every run
    shown = [c for c in configs if id(c) in measured]
    if not shown:
        return [
            *out,
            "Not measured: no run was profiled. Run with --llmbench-profile for the time in collectives "
            "and the host-to-device traffic (the analytical bus volume per step is in metrics.csv).",
            *_timing_line(runs),
        ]
    exposed = any(config_comm(c, "comm_exposed_sec_per_step") is not None for c in comm)
    columns: list[Column] = [("step s", lambda c: fmt.seconds(c.step_time))]
    notes = []
    if comm:
        columns += _comm_columns(comm, exposed)
        notes += [
            "- *in collectives*: time inside communication kernels per step, and its share of those profiled "
            "steps (from their first to their last kernel); from torch.profiler over untimed steps after the "
            "measured window, on the rank with the most such time. One rank has nothing to communicate.",
            "- *exposed*: the part of it no computation overlapped: the step waits for it."
            if exposed
            else "- *exposed* time (not overlapped by computation) is measured on GPU runs only.",
            "- *collectives*, *mean message*: the collectives each profiled step ran and their mean size "
            "(nccl-tests' S), as the profiler recorded them.",
            "- *bus GB/step*: what each rank's links carried per step, summed over those collectives (S x "
            "nccl-tests' bus factor): LoRA's adapters, frozen layers and buckets counted as they ran (the "
            "ZeRO paper's volume, comm_model.py, stays in result.json as the prediction); *bus GB/s* = bus "
            "volume / time in collectives, comparable with nccl-tests' bus bandwidth; a figure above the "
            "link's measured peak is not shown (collectives overlapping on streams).",
            "- *of link busbw*: bus GB/s against the link probe's busbw at the step's mean message size "
            "(below).",
        ]
    if h2d:
        columns += [
            ("H2D GB/s", lambda c: fmt.gbps(c.h2d_gbps)),
            ("link GB/s", lambda c: fmt.gbps(c.mean("h2d_link_gbps"))),
            ("link used", _link_used),
        ]
        offload = [c for c in h2d if gpu_truth.is_offload(c.runs[0].data)]
        what = (
            f"for the offload strategies ({_strategies(offload)}) this is the PCIe traffic of the offload, "
            "states moving from host to GPU every step; for the others it is little more than the input "
            "batches"
            if offload
            else "without offload it is little more than the input batches (offload strategies move their "
            "states over PCIe here)"
        )
        notes += [
            f"- *H2D GB/s*: host-to-device bytes per GPU per second of step: {what}.",
            "- *link GB/s*: what the host-GPU link delivers in a pinned-memory copy probe; *link used* = "
            "H2D / link, how close the run comes to saturating it on average.",
        ]
    out += [
        "Per step and per rank, one row per configuration; the columns are explained under the table.",
        "",
        *_table(shown, configs, columns),
        "",
        *notes,
        *_most_exposed(comm),
        *link_section(configs),
    ]
    sources = sorted({str(s) for c in h2d for r in c.ok_runs if (s := r.data.get("h2d_source"))})
    if sources:
        out += ["", "H2D measured as: " + "; ".join(sources) + "."]
    return out + _timing_line(runs)


# ---- GPU health ---------------------------------------------------------------------------------


def _power_cap_only(runs: Sequence[Run]) -> str:
    """One sentence for the runs held back by the power cap alone: normal, said once."""
    shares = [t.worst for r in runs for t in gpu_truth.throttles(r.data) if t.worst is not None]
    lo, hi = (round(min(shares) * 100), round(max(shares) * 100)) if shares else (None, None)
    span = "" if lo is None else f" (in {lo}% of samples)" if lo == hi else f" (in {lo}-{hi}% of samples)"
    return f"by the power cap alone{span}: {gpu_truth.POWER_CAP_VERDICT}"


def _throttle_lines(runs: Sequence[Run]) -> list[str]:
    """A normal condition (the power cap at the power limit) in one sentence; a line for each run
    that needs attention (thermal or hardware slowdown)."""
    throttled = [(r, ts) for r in runs if r.ok and (ts := gpu_truth.throttles(r.data))]
    if not throttled:
        return []
    bad = [r for r, ts in throttled if gpu_truth.needs_attention(ts)]
    capped_only = [r for r, ts in throttled if not gpu_truth.needs_attention(ts)]
    monitored = sum(1 for r in runs if r.ok and gpu_truth.monitors(r.data))
    # a result may say it throttled without per-rank monitors (older writers): no "of N" then
    of = (
        f"{len(throttled)} of {monitored} monitored runs"
        if monitored >= len(throttled)
        else f"{len(throttled)} runs"
    )
    head = f"Throttled (NVML clock-event reasons, share of the monitor's samples): {of}"
    if not bad:
        return ["", f"{head}, all {_power_cap_only(capped_only)}."]
    head += (
        f". **{len(bad)} slowed down for thermal or hardware reasons**: their numbers understate the GPU; "
        f"{gpu_truth.ATTENTION_ADVICE}."
    )
    lines = [f"- `{r.name}`: {gpu_truth.throttle_text(r.data)}." for r in bad]
    out = ["", head, "", *capped(lines, "throttled runs")]
    if capped_only:
        n = len(capped_only)
        out += ["", f"The other {n} throttled run{'s' if n != 1 else ''}: {_power_cap_only(capped_only)}."]
    return out


def _monitor_errors(configs: Sequence[Config]) -> list[str]:
    """One line per NVML error, naming the GPU configurations that had no monitor because of it."""
    errors: dict[str, list[Config]] = {}
    for c in configs:
        if c.is_cpu or gpu_truth.has_monitor(c):
            continue
        err = next((e for r in c.runs if (e := r.data.get("gpu_monitor_error"))), None)
        if err:
            errors.setdefault(str(err), []).append(c)
    return [f"No GPU monitor for {_names(cs)}: {err}." for err, cs in errors.items()]


def health_section(configs: Sequence[Config], runs: Sequence[Run]) -> list[str]:
    out = ["", "## GPU health during the runs", ""]
    shown = [c for c in configs if gpu_truth.has_monitor(c)]
    errors = _monitor_errors(configs)
    if not shown:
        if configs and all(c.is_cpu for c in configs):
            return [*out, "No GPU in these runs (CPU smoke): nothing to monitor."]
        return [*out, *(errors or ["Not recorded: these result files have no GPU monitor readings."])]
    interval = next(
        (
            m["interval_sec"]
            for c in shown
            for r in c.ok_runs
            for m in gpu_truth.monitors(r.data)
            if m.get("interval_sec")
        ),
        None,
    )
    out.append(
        f"NVML, sampled {f'every {interval:g} s ' if interval else ''}on every rank during the measured "
        "steps: util, power and SM clock are means over samples and ranks; max power, min clock and max "
        "temperature over all of them; *clock limited by* names the throttle reasons seen, with the worst "
        "rank's share of samples."
    )
    columns: list[Column] = [
        ("util %", lambda c: fmt.whole(c.mean("gpu_util_pct"))),
        ("power W", lambda c: fmt.whole(c.mean("gpu_power_w"))),
        ("power W max", lambda c: fmt.whole(config_extreme(c, "power_w_max", max))),
        ("SM MHz", lambda c: fmt.whole(c.mean("sm_clock_mhz"))),
        ("SM MHz min", lambda c: fmt.whole(config_extreme(c, "sm_clock_mhz_min", min))),
        ("max °C", lambda c: fmt.whole(config_extreme(c, "temperature_c_max", max))),
        ("clock limited by", lambda c: gpu_truth.clock_limits(config_throttles(c)) or "nothing"),
    ]
    out += ["", *_table(shown, configs, columns)]
    out += _throttle_lines(runs) or ["", "No run throttled: no power cap, thermal or hardware slowdown seen."]
    return out + (["", *errors] if errors else [])


def render(configs: Sequence[Config], runs: Sequence[Run]) -> list[str]:
    """The three sections, in order."""
    return [*memory_section(configs, runs), *time_section(configs, runs), *health_section(configs, runs)]
