"""Scale on paper: a configuration's step time, tokens/s, scaling efficiency and peak memory per GPU
at world sizes it did not run, from the runs a session measured, each predicted step with a 90%
interval. Standard library only.

The step at each world size comes from plan/step_model.py (the measured compute and optimizer, the
strategy's collectives over the fabric, overlap, the slowest rank). Where a run at 2 or more GPUs
was measured, the model's miss there (its step less the model's) is carried to every larger N:
the costs the model does not know, as they were measured. A miss above FLAG_MISS is named.

Every predicted step carries a 90% interval (plan/interval.py): the inputs' spread, the strategy's
spread from host to host, the model's validated error at that distance for the configuration's
class (`classify`: steady, loose inputs, or a step that waits for parameter gathers), and the step
at both ends of the assumptions' ranges beyond the node (plan/network.Fabric.corner). A flag says
why a prediction's interval is wide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .interval import Calibration, band_text, bounds, doublings, spread_sd, step_cv
from .scale_calibration import CALIBRATION as KEPT
from .step_model import Coll, Model, bus_bytes, peak_gb, tokens_per_gpu_step

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .network import Fabric

CALIBRATION = Calibration(KEPT)
BAND = band_text(KEPT)
"""What the predictions are known to, in words computed from the kept validation (scale_calibration)."""
FLAG_MISS = 0.10
"""A configuration whose model misses a measured world size by more than this is flagged."""
FLAG_PRECISION = 0.05
"""A configuration whose measured steps the prediction starts from are known only to worse than
+-this (their mean's 95% interval, checks/variance.py's mean_interval) is flagged: the prediction is
no closer than its inputs. On 4x H200 five of the eight misses beyond 5% at 4 GPUs started from
such steps (the encoder-decoder's and ZeRO-3's, known to +-5 to 10%)."""
HOST_BOUND_BUSY = 0.80
"""The GPU's busy share of forward and backward (NVML's utilisation over the step less its optimizer)
below which a step is host-bound: in the 2x H200 validation the misses that waited for parameter
gathers were busy 26-74% of it, the GPU-bound runs 86-100%; zero3_offload (70-71%) is flagged too and
was predicted within 2% on two hosts of three (docs/results/2026-11-27-h200x2-overlap)."""
DENSE_GATHER_S = 0.004
"""A step that waits for a parameter gather at intervals this short or shorter is flagged whatever the
GPU's busy share. Over twelve sessions on 2x H200, 4x H200 and 4x H100
(docs/results/2026-11-27-scale-pooled and the three after it), the 29 predictions of world size 2
for steps with a gather every 0.7-4.0 ms (ZeRO-3, zero3_offload, LoRA under ZeRO-3, FSDP on the 50M
encoder-decoder) were 14% too fast at the median and beyond 5% too fast in 25, ZeRO-3 by 34% and 16%
on hosts whose 1-GPU step was GPU-bound (no host-bound flag); the 22 with one every 4.1-18 ms (FSDP
and fsdp_grad_op on llama-1b, FSDP LoRA, one FSDP encoder-decoder) were within 4.5% in 20."""


@dataclass
class Prediction:
    world_size: int
    step_sec: float
    tokens_per_sec: float
    efficiency: float
    peak_gb: float | None
    comm_sec: float
    exposed_sec: float
    measured: bool = False
    """A world size the session ran: the figures are the measurement, for comparison."""
    assumed: list[str] = field(default_factory=list)
    step_low: float | None = None
    step_high: float | None = None
    """The 90% interval of the step (plan/interval.py); None for a measured world size."""

    @property
    def exposed_share(self) -> float:
        return self.exposed_sec / self.step_sec if self.step_sec else 0.0

    def _scaled(self, value: float, step: float | None) -> float | None:
        """A per-step rate (tokens/s, efficiency) at another step time."""
        return value * self.step_sec / step if step else None

    @property
    def tokens_interval(self) -> tuple[float | None, float | None]:
        tps = self.tokens_per_sec
        return self._scaled(tps, self.step_high), self._scaled(tps, self.step_low)

    @property
    def efficiency_interval(self) -> tuple[float | None, float | None]:
        return self._scaled(self.efficiency, self.step_high), self._scaled(self.efficiency, self.step_low)

    def to_dict(self) -> dict[str, Any]:
        interval = None
        if self.step_low is not None:
            interval = {
                "step_sec": [self.step_low, self.step_high],
                "tokens_per_sec": list(self.tokens_interval),
                "efficiency": list(self.efficiency_interval),
            }
        return {
            "world_size": self.world_size,
            "step_sec": self.step_sec,
            "tokens_per_sec": self.tokens_per_sec,
            "efficiency": self.efficiency,
            "interval_90": interval,
            "peak_gb": self.peak_gb,
            "comm_sec": self.comm_sec,
            "exposed_sec": self.exposed_sec,
            "exposed_share": self.exposed_share,
            "measured": self.measured,
            "assumed": self.assumed,
        }


@dataclass
class ConfigScale:
    """One configuration's predictions, from its runs at one or more world sizes."""

    name: str
    base: dict[str, Any]
    anchor: dict[str, Any] | None
    predictions: list[Prediction]
    flags: list[str]
    miss: float | None
    """The model's relative miss at the anchor (the largest measured world size above the base)."""
    bytes_ratio: float | None
    """Bus bytes the profiled steps measured over the model's, at the anchor."""
    klass: str = "steady"
    """Whose validated errors its intervals take (`classify`)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.name,
            "class": self.klass,
            "base_world_size": self.base.get("world_size"),
            "anchor_world_size": self.anchor.get("world_size") if self.anchor else None,
            "miss_at_anchor": self.miss,
            "bus_bytes_measured_over_model": self.bytes_ratio,
            "flags": self.flags,
            "predictions": [p.to_dict() for p in self.predictions],
        }


def _loose_inputs(by_ws: dict[int, dict[str, Any]]) -> str:
    """'+-7.8% at 1 GPU, +-9.6% at 2' for the runs whose mean step time is known to worse than
    FLAG_PRECISION, else ''."""
    loose = []
    for w in sorted(by_ws):
        rel = (by_ws[w].get("step_time_mean_interval") or {}).get("relative")
        if rel is not None and float(rel) > FLAG_PRECISION:
            loose.append(f"+-{float(rel):.1%} at {w} GPU{'s' if w > 1 else ''}")
    return ", ".join(loose)


def gather_wait(base: dict[str, Any], colls: Sequence[Coll]) -> str | None:
    """Why the step's prediction is less certain, or None: a step that waits for parameter gathers in
    forward and backward (FSDP's, ZeRO-3's) pays, at every one of them, its host-side cost and the
    ranks' meeting, which the model has only as the slowest rank of whole steps. That weighs where
    the step is host-bound (the GPU idle between kernels) or the gathers come DENSE_GATHER_S apart
    or closer, whatever the GPU's busy share."""
    util = base.get("gpu_util_pct")
    gathers = sum(c.count for c in colls if c.waited and c.kind == "all_gather")
    step = float(base.get("mean_step_time_sec") or 0.0)
    if not gathers or step <= 0:
        return None
    apart = step / gathers
    # the figures behind DENSE_GATHER_S are a GPU's; a CPU run's step says nothing of them
    dense = apart <= DENSE_GATHER_S and base.get("device") in (None, "cuda")
    busy = None
    if util is not None:
        optimizer = min(float(base.get("optimizer_step_sec") or 0.0), 0.9 * step)
        busy = min(1.0, float(util) / 100 * step / (step - optimizer))
    host_bound = busy is not None and busy < HOST_BOUND_BUSY
    if not (host_bound or dense):
        return None
    at = f"at {base.get('world_size') or 1} GPU"
    if host_bound:
        return (
            f"host-bound: the GPU was busy {busy:.0%} of forward and backward {at}, and the step waits for "
            f"{gathers:.0f} parameter gathers"
        )
    return (
        f"dense gathers: the step waits for a parameter gather every {apart * 1e3:.1f} ms {at} "
        f"({gathers:.0f} a step)"
    )


def classify(base: dict[str, Any], colls: Sequence[Coll], by_ws: dict[int, dict[str, Any]]) -> str:
    """Whose validated errors a configuration's intervals take: 'gathers' (a step that waits for
    parameter gathers, `gather_wait`), 'loose' (inputs known to worse than FLAG_PRECISION), or
    'steady'."""
    if gather_wait(base, colls):
        return "gathers"
    return "loose" if _loose_inputs(by_ws) else "steady"


def _class_words(calibration: Calibration, klass: str, anchored: bool) -> str:
    """'kept predictions of such steps: ...' from the validation's figures, as predicted over measured."""
    error = calibration.model_error(klass, anchored)
    if error is None:
        return "no kept predictions of such steps"
    lo, mid, hi = (math.exp(-r) - 1 for r in (error.high, error.mid, error.low))
    return (
        f"the {error.count} kept predictions of such steps one doubling on came out {mid:+.0%} at the median "
        f"and {lo:+.0%} to {hi:+.0%} for nine in ten: its interval is as wide"
    )


def _flags(
    by_ws: dict[int, dict[str, Any]], model: Model, anchor: dict[str, Any] | None, calibration: Calibration
) -> list[str]:
    flags = []
    if loose := _loose_inputs(by_ws):
        flags.append(
            f"the measured steps it starts from are known only to {loose} (95% interval of the mean): "
            "its interval is at least that wide; more steps there (--llmbench-steps) narrow it"
        )
    if anchor is None and (why := gather_wait(model.base, model.colls)):
        flags.append(f"{why}; {_class_words(calibration, 'gathers', anchored=False)}")
    return flags


def _bytes_scale(model: Model, anchor: dict[str, Any] | None) -> tuple[float, float | None, str | None]:
    """(what the collectives' times are scaled by, measured over modelled bytes, a flag) at the anchor."""
    if anchor is None:
        return 1.0, None, None
    m = int(anchor["world_size"])
    comm = anchor.get("communication") or {}
    modelled = bus_bytes(model.colls, m)
    if comm.get("bus_bytes_source") != "measured" or not comm.get("bus_bytes_per_step") or not modelled:
        return 1.0, None, None
    ratio = float(comm["bus_bytes_per_step"]) / modelled
    flag = None
    if not 0.75 <= ratio <= 1.33:
        flag = (
            f"the profiled steps at {m} GPUs moved {ratio:.2f}x the bytes the model's schedule has: its "
            "collectives are timed from the measured bytes"
        )
    return ratio, ratio, flag


def _anchored(model: Model, anchor: dict[str, Any] | None, scale: float) -> tuple[float, float | None]:
    """(the residual carried, the model's relative miss) at the anchor."""
    if anchor is None:
        return 0.0, None
    predicted = model.step(int(anchor["world_size"]), scale)[0]
    measured = float(anchor["mean_step_time_sec"])
    return measured - predicted, predicted / measured - 1


def _measured(n: int, r: dict[str, Any]) -> Prediction:
    comm = r.get("communication") or {}
    step = float(r["mean_step_time_sec"])
    exposed = float(comm.get("exposed_fraction_of_step") or 0.0) * step
    return Prediction(n, step, float(r.get("tokens_per_sec") or 0.0), 0.0, r.get("peak_vram_gb"),
                      float(comm.get("comm_sec_per_step") or 0.0), exposed, measured=True)  # fmt: skip


def _assumed(n: int, fabric: Fabric, model: Model) -> list[str]:
    assumed = ["network between nodes"] if n > fabric.gpus_per_node else []
    if fabric.measured_world_size < n <= fabric.gpus_per_node:
        assumed.append(f"link busbw measured at {fabric.measured_world_size} GPUs holds for {n}")
    if model.offload != "none" and n > model.n0:
        assumed.append("a node's host cores as many as the measured host's")
    return assumed


def predict_config(
    name: str,
    runs: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    fabric: Fabric,
    calibration: Calibration | None = None,
) -> ConfigScale:
    """Predictions at `sizes` for one configuration's runs (one per world size, weak scaling), each
    with its 90% interval from `calibration` (the kept validation by default)."""
    cal = calibration or CALIBRATION
    by_ws = {int(r.get("world_size") or 1): r for r in runs if r.get("mean_step_time_sec")}
    n0 = min(by_ws)
    base = by_ws[n0]
    model = Model(base, fabric)
    anchors = [w for w in by_ws if w > max(n0, 1)]
    anchor = by_ws[max(anchors)] if anchors else None
    klass = classify(base, model.colls, by_ws)
    flags = _flags(by_ws, model, anchor, cal)
    scale, ratio, bytes_flag = _bytes_scale(model, anchor)
    flags += [bytes_flag] if bytes_flag else []
    residual, miss = _anchored(model, anchor, scale)
    if miss is not None and abs(miss) > FLAG_MISS:
        m = int(anchor["world_size"])  # type: ignore[index]
        flags.append(
            f"the model misses the measured {m} GPUs by {miss:+.1%}: larger world sizes carry that miss as "
            "measured, and their intervals take the anchored predictions' kept errors"
        )
    corners = [Model(base, fabric.corner(slow)) for slow in (False, True)]
    carried = [_anchored(c, anchor, scale)[0] for c in corners]
    relatives = [(r.get("step_time_mean_interval") or {}).get("relative") for r in (base, anchor) if r]
    sd = spread_sd(relatives, cal.host_cv(name, base.get("gpu_name"), klass, step_cv(base)))
    error = cal.model_error(klass, anchored=anchor is not None)
    base_tps = float(base.get("tokens_per_sec") or 0.0)
    out = []
    for n in sorted(set(sizes) | set(by_ws)):
        if n in by_ws:
            p = _measured(n, by_ws[n])
        else:
            step, comm_s, exposed = model.step(n, scale)
            step = max(step + residual, 1e-9)
            ends = [max(c.step(n, scale)[0] + r, 1e-9) for c, r in zip(corners, carried, strict=True)]
            low, high = bounds(min(step, *ends), max(step, *ends), error, doublings(n, list(by_ws)), sd)
            tps = tokens_per_gpu_step(base) * n / step
            assumed = _assumed(n, fabric, model)
            p = Prediction(n, step, tps, 0.0, peak_gb(base, n), comm_s, exposed, assumed=assumed,
                           step_low=low, step_high=high)  # fmt: skip
        p.efficiency = p.tokens_per_sec / (n / n0 * base_tps) if base_tps else 0.0
        out.append(p)
    return ConfigScale(name, base, anchor, out, flags, miss, ratio, klass)


def to_json(
    scales: Sequence[ConfigScale], fabric: Fabric, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """scale.json: the predictions, their intervals and what they rest on; `extra` (the inputs'
    problems, a CPU session's smoke note) goes in as it is."""
    net = None
    if fabric.network_gbytes:
        net = {
            "name": fabric.network_name,
            "busbw_gbytes_per_gpu": fabric.network_gbytes,
            "latency_us_a_ring_step": fabric.network_latency_us,
            "nic_efficiency": fabric.nic_efficiency,
            "source": "assumed",
        }
    return {
        "method": "plan/scale.py and plan/step_model.py: the measured compute and optimizer share, the "
        "strategy's collective schedule timed over the link probe (and the named network beyond the node, "
        "with NCCL's ring and tree latencies), overlap from the probe, the slowest of N ranks from the "
        "measured per-step times, the miss at the largest measured world size carried",
        "interval": "90%: the inputs' spread, the strategy's spread from host to host, the model's validated "
        "error at that distance, the assumptions' ranges beyond the node (plan/interval.py)",
        "error_band": BAND,
        "link": {
            "measured_at_world_size": fabric.measured_world_size,
            "source": "measured (link probe)",
            "hidden_share_beside_compute": fabric.measured_overlap() or None,
            "overlap": fabric.overlap_text(),
        },
        "gpus_per_node": fabric.gpus_per_node,
        "network": net,
        **(extra or {}),
        "configurations": [s.to_dict() for s in scales],
    }
