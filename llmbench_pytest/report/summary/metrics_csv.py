"""summary/metrics.csv: one row per result file, the benchmark card's columns first.

Standard library only. Column order: the benchmark card's thirteen fields, then
`scaling_efficiency_pct` (the benchmark card's fourteenth column), then what llmbench adds, then the
GPU measurements (memory model, communication, host-device, NVML monitor, timing agreement), the
workloads', the batch search's and the technique axes', each group appended last so that existing
columns keep their positions. Values are the result file's, unrounded, so a spreadsheet can redo any
figure; a value that was not measured is an empty cell; lists are joined with ';'.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

from ...results.schema import SEED_FIELDS
from .. import gpu_truth
from ..configs import ConfigKey, config_key
from ..scaling import Scaling, efficiency_of_run

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from ..collect import Run

SEED_COLUMNS = SEED_FIELDS  # the benchmark card's thirteen, in its order (results/schema.py)

# read straight from result.json
RESULT_COLUMNS = (
    "status",
    "model",
    "params",
    "dtype",
    "offload",
    "grad_ckpt",
    "device",
    "gpu_name",
    "nodes",
    "samples_per_sec",
    "tokens_per_sec_per_gpu",
    "step_time_median_sec",
    "step_time_min_sec",
    "step_time_max_sec",
    "step_time_std_sec",
    "step_cv_in_run",
    "peak_reserved_gb",
    "peak_host_rss_gb",
    "model_state_gb",
    "tflops_per_gpu",
    "mfu",
    "mfu_reason",
    "first_loss",
    "last_loss",
)

# computed by the report
DERIVED_COLUMNS = (
    "scaling_mode",
    "scaling_baseline_world_size",
    "checks_failed",
    "error",
    "run",
    "result_path",
)

# the GPU measurements, appended so that the columns above keep their positions
GPU_RESULT_COLUMNS = (
    "compile",
    "model_state_host_gb",
    "model_state_predicted_gb",
    "model_state_gap",
    "model_state_flag",
    "h2d_source",
    "h2d_link_gbps",
    "gpu_util_pct",
    "gpu_power_w",
    "sm_clock_mhz",
    "throttled",
    "throttle_reasons",
    "gpu_monitor_error",
)
# result.json's `communication` object, flattened; comm_ where the bare name would be ambiguous
COMM_COLUMNS = {
    "comm_bus_bytes_per_step": "bus_bytes_per_step",
    "comm_collectives": "collectives",
    "comm_sec_per_step": "comm_sec_per_step",
    "comm_exposed_sec_per_step": "comm_exposed_sec_per_step",
    "compute_sec_per_step": "compute_sec_per_step",
    "collectives_per_step": "collectives_per_step",
    "comm_fraction_of_step": "comm_fraction_of_step",
    "exposed_fraction_of_step": "exposed_fraction_of_step",
    "comm_bus_gbps": "bus_gbps",
    "comm_source": "source",
}
# over the ranks' NVML summaries and the timing block
GPU_DERIVED_COLUMNS = (
    "gpu_power_w_max",
    "sm_clock_mhz_min",
    "gpu_temperature_c_max",
    "clock_event_fractions",
    "timing_events_vs_clock",
)

WORKLOAD_COLUMNS = (
    "workload",
    "optimizer",
    "lora_rank",
    "trainable_params",
    "diagnostic",
    "data",
    "epoch_wall_sec_mean",
    "epoch_samples_per_sec",
    "data_wait_sec_per_epoch",
    "data_wait_fraction",
    "idle_fraction",
    "price_per_gpu_hour",
    "cost_per_1k_samples_usd",
    "cost_per_1m_tokens_usd",
)
BATCH_SEARCH_COLUMNS = ("batch_search_max_fitting", "batch_search_best", "batch_search_best_tokens_per_sec")
# the technique axes (fused loss, fp8, attention backend), appended last so that the columns above
# keep their positions
TECHNIQUE_COLUMNS = (
    "fused_loss",
    "fp8",
    "attention",
    "attention_ran",
    "mfu_note",
    "mfu_vs_fp8_peak",
    "fp8_layers",
    "fused_loss_chunk_rows",
)
# the whole peak predicted before each run (plan/predict.py), appended last
PEAK_PREDICTION_COLUMNS = ("peak_predicted_gb", "peak_reserved_predicted_gb", "peak_prediction_gap")

COLUMNS = (
    *SEED_COLUMNS,
    "scaling_efficiency_pct",
    *RESULT_COLUMNS,
    *DERIVED_COLUMNS,
    *GPU_RESULT_COLUMNS,
    *COMM_COLUMNS,
    *GPU_DERIVED_COLUMNS,
    *WORKLOAD_COLUMNS,
    *BATCH_SEARCH_COLUMNS,
    *TECHNIQUE_COLUMNS,
    *PEAK_PREDICTION_COLUMNS,
)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return value


def row(run: Run, scaling: Scaling | None) -> dict[str, Any]:
    d = run.data
    eff = efficiency_of_run(d.get("tokens_per_sec"), run.world_size, scaling)
    out: dict[str, Any] = {c: d.get(c) for c in SEED_COLUMNS}
    out["scaling_efficiency_pct"] = eff * 100 if eff is not None else None
    out.update({c: d.get(c) for c in RESULT_COLUMNS})
    out["device"] = run.device
    out["gpu_name"] = run.gpu_name
    out["scaling_mode"] = scaling.mode if scaling else None
    out["scaling_baseline_world_size"] = scaling.baseline_ws if scaling else None
    out["checks_failed"] = ";".join(str(c.get("name")) for c in run.failed_checks)
    out["error"] = run.error_line or None
    out["run"] = run.name
    out["result_path"] = str(run.path)
    out.update(gpu_cells(d))
    out.update({c: d.get(c) for c in WORKLOAD_COLUMNS})
    search = d.get("batch_search") or {}
    out["batch_search_max_fitting"] = search.get("max_fitting_batch")
    out["batch_search_best"] = search.get("best_batch")
    out["batch_search_best_tokens_per_sec"] = search.get("best_tokens_per_sec")
    out.update(technique_cells(d))
    out.update({c: d.get(c) for c in PEAK_PREDICTION_COLUMNS})
    return {k: _cell(v) for k, v in out.items()}


def technique_cells(d: Mapping[str, Any]) -> dict[str, Any]:
    """The axes as run (defaults for results that predate them) and what the worker applied."""
    applied = d.get("techniques") or {}
    return {
        "fused_loss": d.get("fused_loss") or "none",
        "fp8": d.get("fp8") or "none",
        "attention": d.get("attention") or "default",
        "attention_ran": d.get("attention_ran"),
        "mfu_note": d.get("mfu_note"),
        "mfu_vs_fp8_peak": d.get("mfu_vs_fp8_peak"),
        "fp8_layers": (applied.get("fp8") or {}).get("layers"),
        "fused_loss_chunk_rows": (applied.get("fused_loss") or {}).get("chunk_rows"),
    }


def _joined(items: Any) -> str | None:
    """A list as one cell: 'a;b'; pairs as 'name=value;...' (collectives and their bus bytes)."""
    if not isinstance(items, list) or not items:
        return None
    return ";".join(f"{i[0]}={i[1]:.0f}" if isinstance(i, list) and len(i) == 2 else str(i) for i in items)


def gpu_cells(d: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {c: d.get(c) for c in GPU_RESULT_COLUMNS}
    out["throttle_reasons"] = _joined(d.get("throttle_reasons"))
    comm = gpu_truth.communication(d)
    out.update({col: comm.get(key) for col, key in COMM_COLUMNS.items()})
    out["comm_collectives"] = _joined(comm.get("collectives"))
    out["gpu_power_w_max"] = gpu_truth.monitor_extreme(d, "power_w_max", max)
    out["sm_clock_mhz_min"] = gpu_truth.monitor_extreme(d, "sm_clock_mhz_min", min)
    out["gpu_temperature_c_max"] = gpu_truth.monitor_extreme(d, "temperature_c_max", max)
    out["clock_event_fractions"] = gpu_truth.clock_event_fractions(d) or None
    out["timing_events_vs_clock"] = (d.get("timing") or {}).get("events_vs_clock")
    return out


def render(runs: Sequence[Run], scaling: Mapping[ConfigKey, Scaling]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for run in runs:
        writer.writerow(row(run, scaling.get(config_key(run))))
    return buf.getvalue()


def write(path: Path, runs: Sequence[Run], scaling: Mapping[ConfigKey, Scaling]) -> Path:
    path.write_text(render(runs, scaling))
    return path
