"""summary/metrics.csv: one row per result file, seed 000's columns first.

Standard library only. Column order: seed 000's thirteen fields, then `scaling_efficiency_pct`
(seed 000's fourteenth column), then what llmbench adds. Values are the result file's, unrounded,
so a spreadsheet can redo any figure; a value that was not measured is an empty cell.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .collect import Run
from .configs import ConfigKey, config_key
from .scaling import Scaling, efficiency_of_run

SEED_COLUMNS = (
    "strategy",
    "world_size",
    "rank",
    "seq_len",
    "tier",
    "steps",
    "per_device_batch",
    "grad_accum",
    "tokens_per_sec",
    "mean_step_time_sec",
    "mean_loss",
    "peak_vram_gb",
    "h2d_gbps_per_gpu",
)

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
    "step_time_cv",
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

COLUMNS = (*SEED_COLUMNS, "scaling_efficiency_pct", *RESULT_COLUMNS, *DERIVED_COLUMNS)


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
    return {k: _cell(v) for k, v in out.items()}


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
