"""Scale on paper: a configuration's step time, tokens/s, scaling efficiency and peak memory per GPU
at world sizes it did not run, from the runs a session measured. Standard library only: every
input is in result.json, the arithmetic is small functions of it (tests/test_scale.py computes
cases by hand).

A step at N GPUs (weak scaling: the per-GPU batch stays, as llmbench measures) is

    step(N) = compute + optimizer x share(N) + exposed(N)            (+ the residual, below)

- compute: the measured step of the smallest world size run (one GPU: no communication) less its
  optimizer share (StepClock.optimizer: from the end of backward to the step's end). Forward and
  backward do the same work per GPU at any N.
- the optimizer: sharded by ZeRO-1/2/3 and FSDP, so its share is 1/N of it (ddp and zero0 keep it
  whole); with offload it runs on the host, on the rank's share of the node's cores over its share
  of the parameters: constant inside a node (config/host_share.py gives each rank cores / ranks),
  falling as 1/nodes beyond it.
- the collectives: the strategy's schedule per step (`schedule`: kind, nccl-tests' size S, count,
  and whether compute can hide it), each timed over the fabric (plan/network.py: the link probe
  inside a node, the named network beyond); where a run at 2 or more GPUs was profiled, the
  schedule's bytes are scaled to what those steps measured.
- exposed: what compute does not hide. Collectives that run beside backward (DDP's and DeepSpeed's
  gradient buckets with overlap_comm) hide under backward's two thirds of the compute, the
  parameter gathers and reductions of FSDP and ZeRO-3 under all of it, less a tail no compute
  follows; ZeRO-0's reduction and ZeRO-1/2's gather of the updated parameters run after it. What
  runs beside compute is not free: NCCL's kernels take SMs and memory bandwidth from it, and the
  link probe measures the share of a collective's time that compute beside it hides
  (worker/overlap_probe.py); the rest is charged to the step.
- the residual: where a run at 2 or more GPUs was measured, the model's miss there (its step less
  the model's) is carried to every larger N, the overlap and per-collective costs the model does
  not know as they were measured. A miss above FLAG_MISS flags the configuration.

The peak per GPU is the recorded prediction (plan/predict.py: a traced step plus the peak model)
with its model states resharded for N (analysis/peak_model.py's resident bytes per parameter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..analysis import peak_model

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .network import Fabric

BAND = (
    "validated out of sample, world size 2 predicted from the 1-GPU runs and the link probe, over "
    "twelve sessions on 2x H200, 4x H200 and 4x H100 (2026-11-27, docs/results/2026-11-27-scale-pooled): "
    "step time within 5% for 60% of 124 predictions and within 10% for 72%; of the 81 that raised no "
    "flag, 83% and 91%. The configurations whose steps reproduce from host to host (DDP, FSDP, "
    "fsdp_grad_op, ZeRO-0/1/2 on llama-1b, the default LoRA under DDP and ZeRO-2) were within 5.3% every "
    "time; the encoder-decoder's and zero2_offload's measured steps move 10-21% from one host to the next, "
    "and steps that wait for dense or host-bound parameter gathers (ZeRO-3, FSDP on the encoder-decoder) "
    "ran 14% slower than predicted at the median (flagged). World size 4 from the 1- and 2-GPU runs: "
    "11 of 19 within 5% and 16 within 10% on 4x H200, 6 of 7 and 7 of 7 on 4x H100 (pre-training "
    "without offload)"
)
"""What the predictions are known to: the validation's figures (tools/scale_validation.py)."""
FLAG_MISS = 0.10
"""A configuration whose model misses a measured world size by more than this is flagged."""
FLAG_PRECISION = 0.05
"""A configuration whose measured steps the prediction starts from are known only to worse than
+-this (their mean's 95% interval, checks/variance.py's mean_interval) is flagged: the prediction is
no closer than its inputs. On 4x H200 five of the eight misses beyond 5% at 4 GPUs started from
such steps (the encoder-decoder's and ZeRO-3's, known to +-5 to 10%)."""
BACKWARD_SHARE = 2 / 3
"""Backward's share of a step's forward and backward compute (twice the forward's FLOPs)."""
DDP_BUCKET_BYTES = 25 * 2**20
"""torch DDP's default bucket_cap_mb."""
ZERO0_CHUNK = 500_000_000
"""DeepSpeed's stage-0 all-reduce chunk (allreduce_bucket_size's default, elements)."""
SHARDED_OPTIMIZER = ("zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op")
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


@dataclass(frozen=True)
class Coll:
    """One entry of a step's collective schedule."""

    kind: str
    size_bytes: float
    count: float
    hidden_by: float
    """The share of the step's forward and backward compute it can hide under (0: none)."""
    waited: bool = False
    """Each one is waited for on the step's path (FSDP's and ZeRO-3's parameter gathers before the
    compute that needs them, DeepSpeed's gradient buckets before the next is filled): its fixed
    cost, the probe's latency of one call through torch.distributed, is paid every time."""


def _p(dtype: str) -> int:
    return 2 if dtype in ("bf16", "fp16") else 4


def _bucket(result: dict[str, Any]) -> int:
    zero = ((result.get("strategy_config") or {}).get("deepspeed_config") or {}).get(
        "zero_optimization"
    ) or {}
    return (
        int(zero.get("reduce_bucket_size") or 0)
        or int((result.get("model_info") or {}).get("hidden_size") or 1) ** 2
    )


def _chunks(total: float, per: float) -> tuple[float, float]:
    """(size, count) of `total` bytes moved in pieces of at most `per`."""
    count = max(1, math.ceil(total / per))
    return total / count, count


def schedule(result: dict[str, Any]) -> list[Coll]:
    """The strategy's collectives per step from the model and its configuration (no profile): what
    a 1-GPU run predicts for more GPUs. Sizes are nccl-tests' S, the same at every N for data
    parallelism (each rank reduces or gathers the whole buffer)."""
    strategy = str(result.get("strategy", "")).removesuffix("_offload").removesuffix("_nvme")
    params = float(result.get("params") or 0)
    trained = float(result.get("trainable_params") or params)
    low = _p(str(result.get("dtype")))
    bucket = _bucket(result) * low
    accum = int(result.get("grad_accum") or 1)
    if strategy == "ddp":  # fp32 gradients of the fp32 master weights, bucket by bucket in backward
        size, count = _chunks(trained * 4, DDP_BUCKET_BYTES)
        return [Coll("all_reduce", size, count, BACKWARD_SHARE)]
    if strategy == "zero0":  # the whole gradient after backward
        size, count = _chunks(trained * low, ZERO0_CHUNK * low)
        return [Coll("all_reduce", size, count, 0.0)]
    if strategy in ("zero1", "zero2"):
        # DeepSpeed all-reduces each gradient bucket as backward fills it (overlap_comm; measured so
        # on 2x H200: all_reduce, not reduce_scatter), then gathers the updated parameters
        size, count = _chunks(trained * low, bucket)
        # and each bucket's reduction is synchronised with the host (waited) before the next is filled
        return [
            Coll("all_reduce", size, count, BACKWARD_SHARE, waited=True),
            Coll("all_gather", trained * low, 1, 0.0),
        ]
    if strategy == "zero3":
        size, count = _chunks(params * low, bucket)
        grads, reduces = _chunks(trained * low, bucket)
        return [
            Coll("all_gather", size, 2 * count * accum, 1.0, waited=True),
            Coll("reduce_scatter", grads, reduces, 1.0, waited=True),
        ]
    if strategy in ("fsdp", "fsdp_grad_op"):
        layers = int((result.get("model_info") or {}).get("layers") or 1)
        gathers = (2 if strategy == "fsdp" else 1) * accum
        size, count = _chunks(params * low, params * low / layers)
        grads, reduces = _chunks(trained * 4, trained * 4 / layers)
        return [
            Coll("all_gather", size, count * gathers, 1.0, waited=True),
            Coll("reduce_scatter", grads, reduces, 1.0),
        ]
    raise ValueError(f"no collective schedule for strategy {result.get('strategy')!r}")


def bus_bytes(colls: Sequence[Coll], n: int) -> float:
    from ..analysis.collectives import bus_factor

    return sum(c.size_bytes * c.count * bus_factor(c.kind, n) for c in colls)


def exposed_sec(
    colls: Sequence[Coll], n: int, compute_sec: float, fabric: Fabric, scale: float = 1.0
) -> tuple[float, float]:
    """(seconds in collectives, seconds of them no compute hides) per step at n GPUs; `scale`
    multiplies every collective's time (the measured bytes over the model's)."""
    hidden_groups: dict[float, list[tuple[float, float]]] = {}
    total = exposed = 0.0
    for c in colls:
        t = fabric.seconds(c.kind, c.size_bytes, n) * scale
        total += t * c.count
        if c.waited:
            exposed += fabric.latency_s(c.kind) * c.count
        if c.hidden_by <= 0:
            exposed += t * c.count
        else:
            hidden_groups.setdefault(c.hidden_by, []).extend(
                [(t, fabric.hidden_share(c.kind))] * max(1, round(c.count))
            )
    for share, times in hidden_groups.items():
        whole = sum(t for t, _ in times)
        tail = times[-1][0]  # the last collective has no compute after it to hide under
        bare = max(tail, whole - share * compute_sec)
        # what runs beside compute still costs the share of it the probe saw compute not hide
        hidden = whole - bare
        kept = sum(t * (1 - h) for t, h in times) / whole if whole else 0.0
        exposed += bare + hidden * kept
    return total, exposed


def optimizer_share(strategy: str, offload: str, n: int, gpus_per_node: int) -> float:
    """The optimizer's time at n GPUs as a share of its time at one (module docstring)."""
    if offload != "none":
        return min(n, gpus_per_node) / n  # the host's cores per rank over its parameters per rank
    return 1 / n if strategy in SHARDED_OPTIMIZER else 1.0


def peak_gb(result: dict[str, Any], n: int) -> float | None:
    """The recorded peak prediction with its model states resharded for n GPUs."""
    pred = result.get("peak_prediction") or {}
    allocated, n0 = pred.get("allocated_gb"), int(result.get("world_size") or 1)
    if allocated is None or not result.get("params"):
        return None
    strategy, offload, dtype = (
        str(result.get("strategy")),
        str(result.get("offload") or "none"),
        str(result.get("dtype")),
    )
    base = strategy.removesuffix("_offload").removesuffix("_nvme")
    # LoRA's results count the frozen base in `params` and the adapters in `trainable_params`
    params = float(result["params"])
    trained = float(result.get("trainable_params") or params)
    frozen = params if result.get("trainable_params") else 0.0

    def states(k: int) -> float:
        per = peak_model.resident_bytes_per_param(
            base, offload, k, dtype, str(result.get("optimizer") or "adamw_torch")
        )
        return trained * per + frozen * peak_model.frozen_bytes_per_param(base, k, dtype)

    return float(allocated) + (states(n) - states(n0)) / 1e9


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

    @property
    def exposed_share(self) -> float:
        return self.exposed_sec / self.step_sec if self.step_sec else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "step_sec": self.step_sec,
            "tokens_per_sec": self.tokens_per_sec,
            "efficiency": self.efficiency,
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.name,
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


def _tokens_per_gpu_step(r: dict[str, Any]) -> float:
    return (
        float(r.get("per_device_batch") or 0) * float(r.get("grad_accum") or 1) * float(r.get("seq_len") or 0)
    )


class Model:
    """The arithmetic of the module docstring for one configuration's base run."""

    def __init__(self, base: dict[str, Any], fabric: Fabric) -> None:
        self.base, self.fabric = base, fabric
        self.n0 = int(base.get("world_size") or 1)
        self.colls = schedule(base)
        step = float(base["mean_step_time_sec"])
        self.optimizer = float(base.get("optimizer_step_sec") or 0.0)
        self.strategy = str(base.get("strategy", "")).removesuffix("_offload").removesuffix("_nvme")
        self.offload = str(base.get("offload") or "none")
        self.forward_backward = max(0.0, step - self.optimizer)
        """The base's step less its optimizer: the compute collectives can hide under."""
        # a base of 2 or more GPUs carries its own collectives: compute is what they leave
        self.compute = step - self.optimizer
        if self.n0 > 1:
            self.compute -= self.exposed(self.n0)[1]
            self.optimizer /= optimizer_share(self.strategy, self.offload, self.n0, fabric.gpus_per_node)

    def exposed(self, n: int, scale: float = 1.0) -> tuple[float, float]:
        return exposed_sec(self.colls, n, self.forward_backward, self.fabric, scale)

    def step(self, n: int, scale: float = 1.0) -> tuple[float, float, float]:
        """(step, seconds in collectives, exposed) at n GPUs before any residual."""
        comm, exposed = self.exposed(n, scale) if n > 1 else (0.0, 0.0)
        share = optimizer_share(self.strategy, self.offload, n, self.fabric.gpus_per_node)
        return self.compute + self.optimizer * share + exposed, comm, exposed


def host_bound_flag(base: dict[str, Any], colls: Sequence[Coll]) -> str | None:
    """Why a prediction from one world size is likely too fast, or None: a step that waits for
    parameter gathers in forward and backward (FSDP's, ZeRO-3's) pays, at every one of them, its
    host-side cost and the slower rank's lag, which a 1-GPU run cannot show and the model does not
    have. That weighs where the step is host-bound (the GPU idle between kernels) or the gathers
    come DENSE_GATHER_S apart or closer, whatever the GPU's busy share."""
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
    why = (
        f"host-bound: the GPU was busy {busy:.0%} of forward and backward {at}, and the step waits for "
        f"{gathers:.0f} parameter gathers"
        if host_bound
        else f"dense gathers: the step waits for a parameter gather every {apart * 1e3:.1f} ms {at} "
        f"({gathers:.0f} a step)"
    )
    return (
        f"{why}; such steps ran 14% slower at 2 GPUs than predicted at the median, up to 34%, on 2x "
        "H200, 4x H200 and 4x H100 (a gather's host-side cost and the ranks' meeting, 0.03-1.2 ms each, "
        "not modelled): likely too fast until a run at 2 or more GPUs anchors it"
    )


def predict_config(
    name: str, runs: Sequence[dict[str, Any]], sizes: Sequence[int], fabric: Fabric
) -> ConfigScale:
    """Predictions at `sizes` for one configuration's runs (one per world size, weak scaling)."""
    by_ws = {int(r.get("world_size") or 1): r for r in runs if r.get("mean_step_time_sec")}
    n0 = min(by_ws)
    base = by_ws[n0]
    model = Model(base, fabric)
    anchors = [w for w in by_ws if w > max(n0, 1)]
    anchor = by_ws[max(anchors)] if anchors else None
    flags: list[str] = []
    if loose := _loose_inputs(by_ws):
        flags.append(
            f"the measured steps it starts from are known only to {loose} (95% interval of the mean): "
            "the prediction is no closer than that; more steps there (--llmbench-steps) narrow it"
        )
    residual, miss, scale, ratio = 0.0, None, 1.0, None
    if anchor is None and (host_bound := host_bound_flag(base, model.colls)):
        flags.append(host_bound)
    if anchor is not None:
        m = int(anchor["world_size"])
        measured_bytes = (anchor.get("communication") or {}).get("bus_bytes_per_step")
        source = (anchor.get("communication") or {}).get("bus_bytes_source")
        modelled = bus_bytes(model.colls, m)
        if source == "measured" and measured_bytes and modelled:
            ratio = measured_bytes / modelled
            scale = ratio
            if not 0.75 <= ratio <= 1.33:
                flags.append(
                    f"the profiled steps at {m} GPUs moved {ratio:.2f}x the bytes the model's schedule "
                    "has: its collectives are timed from the measured bytes"
                )
        predicted_m = model.step(m, scale)[0]
        residual = float(anchor["mean_step_time_sec"]) - predicted_m
        miss = predicted_m / float(anchor["mean_step_time_sec"]) - 1
        if abs(miss) > FLAG_MISS:
            flags.append(
                f"the model misses the measured {m} GPUs by {miss:+.1%} (predicted {predicted_m:.4f} s, "
                f"measured {float(anchor['mean_step_time_sec']):.4f} s): larger world sizes carry that "
                "miss as measured, and are less certain"
            )
    base_tps = float(base.get("tokens_per_sec") or 0.0)
    out = []
    for n in sorted(set(sizes) | set(by_ws)):
        if n in by_ws:
            r = by_ws[n]
            comm = r.get("communication") or {}
            step = float(r["mean_step_time_sec"])
            exposed = float(comm.get("exposed_fraction_of_step") or 0.0) * step
            p = Prediction(n, step, float(r.get("tokens_per_sec") or 0.0), 0.0, r.get("peak_vram_gb"),
                           float(comm.get("comm_sec_per_step") or 0.0), exposed, measured=True)  # fmt: skip
        else:
            step, comm_s, exposed = model.step(n, scale)
            step = max(step + residual, 1e-9)
            assumed = ["network between nodes"] if n > fabric.gpus_per_node else []
            if fabric.measured_world_size < n <= fabric.gpus_per_node:
                assumed.append(f"link busbw measured at {fabric.measured_world_size} GPUs holds for {n}")
            if model.offload != "none" and n > n0:
                assumed.append("a node's host cores as many as the measured host's")
            tps = _tokens_per_gpu_step(base) * n / step
            p = Prediction(n, step, tps, 0.0, peak_gb(base, n), comm_s, exposed, assumed=assumed)
        p.efficiency = p.tokens_per_sec / (n / n0 * base_tps) if base_tps else 0.0
        out.append(p)
    return ConfigScale(name, base, anchor, out, flags, miss, ratio)


def to_json(scales: Sequence[ConfigScale], fabric: Fabric) -> dict[str, Any]:
    net = None
    if fabric.network_gbytes:
        net = {
            "name": fabric.network_name,
            "busbw_gbytes_per_gpu": fabric.network_gbytes,
            "latency_us": fabric.network_latency_us,
            "source": "assumed",
        }
    return {
        "method": "plan/scale.py: the measured compute and optimizer share, the strategy's collective "
        "schedule timed over the link probe (and the named network beyond the node), overlap by strategy, "
        "the miss at the largest measured world size carried",
        "error_band": BAND,
        "link": {
            "measured_at_world_size": fabric.measured_world_size,
            "source": "measured (link probe)",
            "hidden_share_beside_compute": fabric.measured_overlap() or None,
            "overlap": fabric.overlap_text(),
        },
        "gpus_per_node": fabric.gpus_per_node,
        "network": net,
        "configurations": [s.to_dict() for s in scales],
    }
