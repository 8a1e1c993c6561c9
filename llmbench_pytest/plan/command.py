"""`llmbench plan`: which strategies fit a model on a GPU, and the largest batch each can take.

For every strategy the step is traced at the asked batch (worker/step_trace.py, on this CPU, a
few seconds per precision) and the strategy's states and buffers added (analysis/peak_model.py).
Activations and temporaries grow in proportion to the batch: a second trace at batch 1 gives the
share of one sequence, and the largest batch that fits is the most sequences whose predicted
reserved memory stays within the GPU's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..analysis.peak_model import RESERVED_OVER_ALLOCATED, PeakPrediction
from ..config.presets import gpu_memory, resolve_model
from ..config.spec import RunSpec, SpecError, parse_strategy

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True, slots=True)
class PlanRow:
    strategy: str
    prediction: PeakPrediction
    per_sequence_gb: float
    largest_batch: int


def _spec(strategy: str, model: str, gpus: int, batch: int, seq_len: int, dtype: str, workload: str,
          grad_ckpt: bool) -> RunSpec:  # fmt: skip
    info, offload = parse_strategy(strategy)
    nvme = "/plan" if offload == "nvme" else None  # the path changes nothing on the device
    return RunSpec(
        strategy=info.name, offload=offload, model=model, seq_len=seq_len, per_device_batch=batch, steps=1,
        warmup=0, dtype=dtype, world_size=gpus, device="cuda", workload=workload, grad_ckpt=grad_ckpt,
        nvme_path=nvme,
    )  # fmt: skip


def plan(
    model: str, gpu: str, gpus: int, strategies: list[str], *, batch: int | None, seq_len: int | None,
    dtype: str, workload: str, grad_ckpt: bool,
) -> tuple[str, float, list[PlanRow]]:  # fmt: skip
    """(GPU name, its memory in GB, one row per strategy)."""
    from .predict import predict_spec

    gpu_name, capacity = gpu_memory(gpu)
    if gpus < 1:
        raise SpecError(f"--gpus must be 1 or more; got {gpus}.")
    preset = resolve_model(model)
    batch = batch or preset.batch
    seq_len = seq_len or preset.seq_len
    out = []
    for name in strategies:
        spec = _spec(name, model, gpus, batch, seq_len, dtype, workload, grad_ckpt)
        at_batch = predict_spec(spec, preset)
        out.append(PlanRow(name, at_batch, *_largest_batch(at_batch, batch, capacity)))
    return gpu_name, capacity, out


def _activation(p: PeakPrediction) -> float:
    return p.parts["activations"] + p.parts["temporaries"]


def _largest_batch(at_batch: PeakPrediction, batch: int, capacity: float) -> tuple[float, int]:
    """(GB per sequence, the largest batch whose predicted reserved memory fits): the end of forward
    grows with the batch (activations, temporaries, taken as proportional to it, as the batch
    search takes them: peak_model.largest_batch), the optimizer step does not. A second trace at
    batch 1 for a fixed share gave the same largest batch for every strategy of llama-1b on H100
    and llama-7b on 8 x 80 GiB at 4096 tokens (2026-11-26), at twice the time."""
    headroom = capacity / RESERVED_OVER_ALLOCATED
    per_seq = _activation(at_batch) / batch
    if at_batch.step_gb > headroom or per_seq <= 0:
        return per_seq, 0
    fixed = at_batch.parts["model_states"] + at_batch.parts["buffers"]
    return per_seq, max(0, math.floor((headroom - fixed) / per_seq))


def format_table(model: str, gpu_name: str, capacity: float, gpus: int, batch: int, seq_len: int,
                 rows: list[PlanRow]) -> str:  # fmt: skip
    lines = [
        f"{model} on {gpus} x {gpu_name} ({capacity:.1f} GB each), batch {batch} x {seq_len} tokens per GPU",
        "",
        f"{'strategy':<15}{'states':>8}{'activ.':>8}{'temp.':>8}{'buffers':>9}{'alloc.':>8}{'reserved':>10}"
        f"  {'fits':<5}{'largest batch':>14}",
    ]
    for r in rows:
        p = r.prediction
        parts = p.parts
        lines.append(
            f"{r.strategy:<15}{parts['model_states']:>8.2f}{parts['activations']:>8.2f}{parts['temporaries']:>8.2f}"
            f"{parts['buffers']:>9.2f}{p.allocated_gb:>8.2f}{p.reserved_gb:>10.2f}  "
            f"{'yes' if p.fits(capacity) else 'no':<5}"
            f"{r.largest_batch:>14}"
        )
    lines += [
        "",
        "GB per GPU (1e9 bytes). Predicted peak: model states resident at the end of forward, a traced",
        f"step's activations and temporaries, the strategy's buffers; reserved = allocated x "
        f"{RESERVED_OVER_ALLOCATED}.",
        "Checked against every measured GPU run in the repository's docs/results: the table and its figures",
        "in docs/results/2026-11-25-peak-prediction (tools/peak_table.py remakes them).",
    ]
    return "\n".join(lines)


def plot(rows: list[PlanRow], capacity: float, title: str, path: Path) -> None:
    """Stacked parts per strategy against the GPU's memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [r.strategy for r in rows]
    bottom = [0.0] * len(rows)
    for part in ("model_states", "activations", "temporaries", "buffers"):
        values = [r.prediction.parts[part] for r in rows]
        ax.bar(names, values, bottom=bottom, label=part.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.axhline(
        capacity / RESERVED_OVER_ALLOCATED, color="black", linestyle="--", label="fits below (allocated)"
    )
    ax.set_ylabel("predicted peak allocated per GPU (GB)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    plt.xticks(rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
