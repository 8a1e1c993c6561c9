"""The step-time model of scale on paper: one configuration's step at N GPUs from the parts its
measured run gives. Standard library only: every input is in result.json, the arithmetic is small
functions of it (tests/test_scale.py computes cases by hand). plan/scale.py predicts with it.

A step at N GPUs (weak scaling: the per-GPU batch stays, as llmbench measures) is

    step(N) = compute + optimizer x share(N) + exposed(N) + slowest rank(N)

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
  (worker/overlap_probe.py); the rest is charged to the step. Beyond the node the same bytes take
  longer on the network, but they cost compute what they cost at the node's speed (the probe's
  share of the collective's time inside the node); the rest of their time hides under compute
  where compute is long enough.
- the slowest rank: a step of N ranks ends when the slowest ends, so where a rank's own steps vary
  the step grows by the expected maximum of N draws from the measured per-step times over their
  mean (plan/slowest_rank.py).

The peak per GPU is the recorded prediction (plan/predict.py: a traced step plus the peak model)
with its model states resharded for N (analysis/peak_model.py's resident bytes per parameter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis import peak_model
from . import slowest_rank

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .network import Fabric

BACKWARD_SHARE = 2 / 3
"""Backward's share of a step's forward and backward compute (twice the forward's FLOPs)."""
DDP_BUCKET_BYTES = 25 * 2**20
"""torch DDP's default bucket_cap_mb."""
ZERO0_CHUNK = 500_000_000
"""DeepSpeed's stage-0 all-reduce chunk (allreduce_bucket_size's default, elements)."""
SHARDED_OPTIMIZER = ("zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op")


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


DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "float8": 1}


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
        # llmbench's FSDP gathers in the run's dtype and reduces in fp32 (MixedPrecisionPolicy);
        # another framework's policy may say otherwise (strategy_config's gather_dtype, reduce_dtype)
        config = result.get("strategy_config") or {}
        gather = DTYPE_BYTES.get(str(config.get("gather_dtype")), low)
        reduce = DTYPE_BYTES.get(str(config.get("reduce_dtype")), 4)
        size, count = _chunks(params * gather, params * gather / layers)
        grads, reduces = _chunks(trained * reduce, trained * reduce / layers)
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
            # what it costs compute beside it: the share the probe saw compute not hide, of its time
            # at the node's speed (across nodes the same bytes go through the same kernels, slower)
            cost = min(t, fabric.in_node_seconds(c.kind, c.size_bytes, n) * scale)
            cost *= 1 - fabric.hidden_share(c.kind, n)
            hidden_groups.setdefault(c.hidden_by, []).extend([(t, cost)] * max(1, round(c.count)))
    for share, times in hidden_groups.items():
        whole = sum(t for t, _ in times)
        tail = times[-1][0]  # the last collective has no compute after it to hide under
        bare = max(tail, whole - share * compute_sec)
        hidden = whole - bare
        kept = sum(cost for _, cost in times) / whole if whole else 0.0
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


def tokens_per_gpu_step(r: dict[str, Any]) -> float:
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

    def wait(self, n: int) -> float:
        """What the slowest of n ranks adds over the base's own steps (plan/slowest_rank.py)."""
        return slowest_rank.wait_sec(self.base.get("step_times_sec"), n, self.n0)

    def step(self, n: int, scale: float = 1.0) -> tuple[float, float, float]:
        """(step, seconds in collectives, exposed) at n GPUs before any residual."""
        comm, exposed = self.exposed(n, scale) if n > 1 else (0.0, 0.0)
        share = optimizer_share(self.strategy, self.offload, n, self.fabric.gpus_per_node)
        return self.compute + self.optimizer * share + exposed + self.wait(n), comm, exposed
