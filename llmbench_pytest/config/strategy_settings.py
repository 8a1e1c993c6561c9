"""The strategies' own settings: the values they run at by default, the axes that sweep them, and a
user's DeepSpeed config merged over them.

Standard library only: the options parse with it before torch loads, and the worker's
DeepSpeed strategy (worker/strategies/deepspeed_zero.build_config) composes the config it runs
from it, which `llmbench plan` reads too.

The defaults follow the maintainers' guidance, scaled down where a model is smaller than the
guidance assumes:

- ZeRO-3's reduce and all-gather buckets, prefetch bucket and persistence threshold: DeepSpeed's
  autotuner's ZeRO-3 template (deepspeed/autotuning/config_templates/template_zero3.json) and
  the example of its config documentation (docs/_pages/config-json.md) use buckets and prefetch
  of 5e8 elements and persistence below 1e6; 5e8 is also the code's own default for the buckets
  of every stage. The Hugging Face integration's "auto" values (reduce bucket hidden^2, prefetch
  0.9 hidden^2, persistence 10 hidden), which this suite used before, made 780 collectives a
  step for llama-7b on 4x H200 (0.95 s of a 1.21 s step exposed); at the guidance's values the same
  host measured ZeRO-3 on llama-1b at 2 GPUs at 115,782 tokens/s where it had 85,728 (FSDP:
  118,935), and llama-7b at 4 GPUs at 13,485 where it had 9,728. DeepSpeed's tracker tells the
  same story (deepspeedai/DeepSpeed#5047: too many all-gathers, fixed with the persistence
  threshold; #3901: ZeRO-3 and FSDP within 3% of each other on Falcon-7B).
- ZeRO-0 to 2: the Hugging Face rule for now (zero_defaults says why), DeepSpeed's 5e8 one
  --llmbench-zero-bucket value away.
- fsdp: its root unit is kept gathered from forward to backward (fully_shard's documentation:
  "For best performance, we usually set False for the root module").
- DDP's bucket: torch's own default, 25 MB (torchtitan uses 100: --llmbench-ddp-bucket-mb sweeps it).
- FSDP2: one unit per transformer block, then the root (the fully_shard documentation's pattern);
  fsdp reshards after forward, fsdp_grad_op does not: that pair is reshard_after_forward's sweep.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .spec import SpecError

if TYPE_CHECKING:
    from .spec import StrategyInfo

DEFAULT = "default"
HF_AUTO = "hf_auto"
GUIDANCE_BUCKET = 500_000_000
"""Elements: DeepSpeed's reduce/all-gather bucket and ZeRO-3 prefetch (autotuner template, docs)."""
GUIDANCE_PERSISTENCE = 1_000_000
"""Elements: ZeRO-3 keeps parameters smaller than this whole on every rank (autotuner template)."""
PERSISTENCE_SHARE = 1000
"""...but never one of a thousandth of the model or more. The guidance's 1e6 is about a thousandth
of the ~1B models it is tuned on (llama-1b here: 0.95e9); at llama-tiny's 1.3M parameters 1e6 would
keep the whole model unsharded, a thousandth keeps only its norms whole (as 1e6 does for llama-1b
and llama-7b, whose smallest matrices are 4.2M and 16.8M)."""
DDP_BUCKET_MB = 25
"""torch.nn.parallel.DistributedDataParallel's bucket_cap_mb default."""


@dataclass(frozen=True)
class Axis:
    """One setting the suite can sweep: a RunSpec field, its test-id prefix, what it sets."""

    field: str
    prefix: str
    stages: tuple[int, ...] = ()
    """The ZeRO stages it applies to (empty: not a DeepSpeed setting)."""
    family: str = "deepspeed"
    unit: str = "elements"
    sets: str = ""

    def applies(self, info: StrategyInfo) -> bool:
        if info.family != self.family:
            return False
        return not self.stages or info.zero_stage in self.stages

    @property
    def option(self) -> str:
        return "--llmbench-" + self.field.replace("_", "-")


AXES = (
    Axis("zero_bucket", "bucket", (1, 2, 3), sets="reduce_bucket_size and allgather_bucket_size"),
    Axis("zero3_prefetch", "prefetch", (3,), sets="stage3_prefetch_bucket_size"),
    Axis("zero3_persistence", "persist", (3,), sets="stage3_param_persistence_threshold"),
    Axis("ddp_bucket_mb", "ddpbucket", family="ddp", unit="MB", sets="bucket_cap_mb"),
)
BY_FIELD = {a.field: a for a in AXES}


def count_text(value: float) -> str:
    """A count as a user writes it: 500000000 -> '5e8', 25000000 -> '25e6', 25 -> '25', 0.5 -> '0.5'."""
    if value != int(value):
        return f"{value:g}"
    digits = str(int(value))
    stripped = digits.rstrip("0")
    zeros = len(digits) - len(stripped)
    return f"{stripped}e{zeros}" if zeros >= 3 else digits


def parse_value(axis: Axis, raw: Any) -> str:
    """One value of an axis, in its canonical text: default, hf_auto (DeepSpeed's), or a number."""
    text = str(raw).strip().lower()
    if text == DEFAULT or (text == HF_AUTO and axis.family == "deepspeed"):
        return text
    words = f"{DEFAULT}, {HF_AUTO} or" if axis.family == "deepspeed" else f"{DEFAULT} or"
    zero_ok = axis.prefix == "persist"  # persisting nothing is a setting; an empty bucket is not
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_ok):
        least = ", 0 or more" if zero_ok else " above 0"
        raise SpecError(f"must be {words} a number of {axis.unit}{least}; got {raw!r}")
    if axis.unit == "elements" and number != int(number):
        raise SpecError(f"must be {words} a whole number of elements; got {raw!r}")
    return count_text(number)


def axis_values(axis: Axis, raw: Any) -> tuple[str, ...]:
    """Comma-separated values of one axis (each runs as its own configuration)."""
    items = raw if isinstance(raw, (list, tuple)) else str(raw).replace(" ", ",").split(",")
    values = [str(x).strip() for x in items if str(x).strip()]
    if not values:
        raise SpecError(f"needs one or more values ({DEFAULT}, or a number of {axis.unit}), comma-separated")
    return tuple(dict.fromkeys(parse_value(axis, v) for v in values))


def settings_label(fields: dict[str, Any], info: StrategyInfo) -> str:
    """'bucket_hf_auto-persist_1e5' for the axes off their defaults that apply to this strategy, and
    'dsconfig_NAME' for a DeepSpeed run given the user's config file NAME: how the test id, the
    result's folder and the report tell a setting's run from the defaults' ("" at the defaults)."""
    parts = [
        f"{a.prefix}_{fields.get(a.field, DEFAULT)}"
        for a in AXES
        if a.applies(info) and fields.get(a.field, DEFAULT) != DEFAULT
    ]
    if info.family == "deepspeed" and fields.get("deepspeed_config"):
        stem = os.path.splitext(os.path.basename(fields.get("deepspeed_config_file") or "file"))[0]
        parts.append("dsconfig_" + re.sub(r"[^A-Za-z0-9_]+", "_", stem))
    return "-".join(parts)


def zero_defaults(stage: int, params: int, hidden_size: int) -> dict[str, int]:
    """ZeRO-3: DeepSpeed's guidance (module docstring), never beyond the model: a bucket or prefetch
    larger than the model's parameters holds nothing more (DeepSpeed still allocates a bucket
    whole: 2 GB of fp32 for a 1M-parameter CPU model), so the guidance's behaviour is kept at a
    small model's size; persistence stops at a thousandth of the model (PERSISTENCE_SHARE).

    ZeRO-0 to 2 keep the Hugging Face rule (a bucket of hidden^2 elements, `hf_auto`): they gather
    no parameter in forward, so the bucket sets only how their gradients are reduced, and ZeRO-2
    measured 115,206 tokens/s against FSDP's 118,935 at it (llama-1b, 2x H200); the memory they
    are predicted to hold (analysis/memory_model.py) is measured at it, with buckets smaller than
    the embedding. --llmbench-zero-bucket=5e8 measures DeepSpeed's own default beside it."""
    if stage != 3:
        square = hf_auto("reduce_bucket_size", hidden_size)
        return {"reduce_bucket_size": square, "allgather_bucket_size": square}
    whole = max(2, params + params % 2)
    bucket = min(GUIDANCE_BUCKET, whole)
    return {
        "reduce_bucket_size": bucket,
        "allgather_bucket_size": bucket,
        "stage3_prefetch_bucket_size": bucket,
        "stage3_param_persistence_threshold": min(GUIDANCE_PERSISTENCE, params // PERSISTENCE_SHARE),
    }


def hf_auto(key: str, hidden_size: int) -> int:
    """The Hugging Face integration's "auto" value of a ZeRO setting (transformers' deepspeed
    integration, HfTrainerDeepSpeedConfig), by the model's hidden size."""
    square = hidden_size * hidden_size
    return {
        "reduce_bucket_size": square,
        "allgather_bucket_size": square,  # not an HF "auto" key; the bucket axis sets both alike
        "stage3_prefetch_bucket_size": int(0.9 * square),
        "stage3_param_persistence_threshold": 10 * hidden_size,
    }[key]


def axis_settings(fields: dict[str, Any], stage: int, hidden_size: int) -> dict[str, int]:
    """The ZeRO settings the axes set off their defaults, for a run at `stage`."""
    out: dict[str, int] = {}
    for axis in AXES:
        value = fields.get(axis.field, DEFAULT)
        if axis.family != "deepspeed" or stage not in axis.stages or value == DEFAULT:
            continue
        for key in axis.sets.split(" and "):
            out[key] = hf_auto(key, hidden_size) if value == HF_AUTO else int(float(value))
    return out


def ddp_bucket_mb(value: str) -> float:
    return float(DDP_BUCKET_MB if value == DEFAULT else float(value))


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into `base` key by key (nested dicts merged, not replaced)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
