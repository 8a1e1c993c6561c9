"""What one benchmark run is: the strategy table and the frozen, validated RunSpec.

Imports only the standard library: the pytest plugin validates options with it before any
torch is loaded, and the worker side receives the same object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Dtype = Literal["bf16", "fp16", "fp32"]
Offload = Literal["none", "cpu", "nvme"]
DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32")
WORKLOADS: tuple[str, ...] = ("causal_lm", "lora", "seq2seq")
"""causal_lm: pre-training a decoder; lora: LoRA fine-tuning of one (as the LoRA fine-tuning guide
does); seq2seq: an encoder-decoder Transformer on synthetic token pairs, from memory or disk (as the
encoder-decoder benchmark does)."""
OPTIMIZERS: tuple[str, ...] = ("adamw_torch", "paged_adamw_8bit")
DATA_SOURCES: tuple[str, ...] = ("memory", "disk")
FUSED_LOSSES: tuple[str, ...] = ("none", "chunked", "liger")
"""none: the model's own loss over materialised logits; chunked: llmbench's linear cross-entropy
computed a chunk of rows at a time (plain torch, runs everywhere); liger: liger-kernel's fused
linear cross-entropy (Triton, CUDA only)."""
FP8_RECIPES: tuple[str, ...] = ("none", "tensorwise", "rowwise")
"""torchao float8 training recipes for the blocks' linear layers (lm_head stays in 16-bit)."""
ATTENTION_BACKENDS: tuple[str, ...] = ("default", "flash", "cudnn", "efficient", "math", "fa2")
"""default: whatever SDPA picks; flash, cudnn, efficient, math: that SDPA backend alone
(torch.nn.attention.sdpa_kernel); fa2: transformers' flash_attention_2 (the flash-attn package)."""
OFFLOAD_SUFFIX = {"cpu": "_offload", "nvme": "_nvme"}


class SpecError(ValueError):
    """A user-facing configuration error: the message names the setting, the value and the fix."""


@dataclass(frozen=True, slots=True)
class StrategyInfo:
    """One distributed strategy as users select it by name."""

    name: str
    """Base name used in test ids and result files (``zero2``)."""
    family: Literal["ddp", "fsdp", "deepspeed"]
    """Which strategy module implements it."""
    summary: str
    """One line for help text and reports."""
    offload: tuple[str, ...] = ()
    """Offload targets it supports (``cpu``, ``nvme``); empty when it keeps everything on device."""
    zero_stage: int | None = None
    """DeepSpeed ZeRO stage, for the deepspeed family."""
    shards: tuple[str, ...] = ()
    """Which model states it partitions across ranks (params, grads, optimizer)."""


STRATEGIES: dict[str, StrategyInfo] = {
    s.name: s
    for s in (
        StrategyInfo("ddp", "ddp", "DistributedDataParallel: every rank holds all model states"),
        StrategyInfo(
            "fsdp", "fsdp", "FSDP2 fully_shard, full sharding", shards=("params", "grads", "optimizer")
        ),
        StrategyInfo(
            "fsdp_grad_op",
            "fsdp",
            "FSDP2 with parameters kept after forward; gradients and optimizer state sharded",
            shards=("grads", "optimizer"),
        ),
        StrategyInfo("zero0", "deepspeed", "DeepSpeed, ZeRO disabled (data parallel)", zero_stage=0),
        StrategyInfo(
            "zero1",
            "deepspeed",
            "DeepSpeed ZeRO-1: optimizer state partitioned",
            offload=("cpu",),
            zero_stage=1,
            shards=("optimizer",),
        ),
        StrategyInfo(
            "zero2",
            "deepspeed",
            "DeepSpeed ZeRO-2: optimizer state and gradients partitioned",
            offload=("cpu",),
            zero_stage=2,
            shards=("grads", "optimizer"),
        ),
        StrategyInfo(
            "zero3",
            "deepspeed",
            "DeepSpeed ZeRO-3: parameters, gradients and optimizer state partitioned",
            offload=("cpu", "nvme"),
            zero_stage=3,
            shards=("params", "grads", "optimizer"),
        ),
    )
}

# The matrix a session runs when --llmbench-strategies is not given.
DEFAULT_STRATEGIES: tuple[str, ...] = (
    "ddp",
    "fsdp",
    "fsdp_grad_op",
    "zero0",
    "zero1",
    "zero2",
    "zero3",
    "zero2_offload",
    "zero3_offload",
    "zero3_nvme",
)


def fp8_needs_compile(recipe: str) -> str:
    """Why fp8 without --llmbench-compile is refused on a GPU, with the fix."""
    return (
        f"--llmbench-fp8={recipe} needs --llmbench-compile on a GPU: eager float8 casts and scales every "
        "weight and activation in separate kernels and runs slower than bf16 (a bare loop on one H100, "
        "llama-1b: 26.7K tokens/s eager, 102K compiled), so its figure would say fp8 is slow. Add "
        "--llmbench-compile, or drop --llmbench-fp8."
    )


def offload_variants() -> list[str]:
    return [s.name + OFFLOAD_SUFFIX[o] for s in STRATEGIES.values() for o in s.offload]


def parse_strategy(name: str) -> tuple[StrategyInfo, Offload]:
    """``zero3_nvme`` -> (zero3, "nvme"). Refuses unknown names and offload where it cannot happen."""
    name = name.strip()
    for offload, suffix in OFFLOAD_SUFFIX.items():
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            info = STRATEGIES.get(base)
            if info is None:
                break
            if offload not in info.offload:
                can = ", ".join(v for v in offload_variants() if v.endswith(suffix)) or "none"
                where = "NVMe" if offload == "nvme" else "CPU"
                raise SpecError(
                    f"strategy {name!r}: {base} cannot offload to {where}. "
                    f"Strategies that can: {can}. Drop the {suffix!r} suffix or pick one of those."
                )
            return info, offload  # type: ignore[return-value]
    info = STRATEGIES.get(name)
    if info is None:
        raise SpecError(
            f"unknown strategy {name!r}: choose from {', '.join(STRATEGIES)} "
            f"or an offload variant ({', '.join(offload_variants())})."
        )
    return info, "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    """Everything that decides what one benchmark run trains and how. Hashable and JSON-able."""

    strategy: str
    """Base strategy name (a key of STRATEGIES)."""
    offload: Offload = "none"
    """Where DeepSpeed puts optimizer state (and, for ZeRO-3, parameters): none, cpu or nvme."""
    model: str
    """A preset name from fixtures/models.toml, or a local config.json file or directory."""
    seq_len: int
    """Tokens per sequence."""
    per_device_batch: int
    """Sequences per rank per micro-step."""
    grad_accum: int = 1
    """Micro-steps per optimizer step."""
    steps: int
    """Measured optimizer steps: exactly these, or at most these when min_steps is set."""
    warmup: int
    """Optimizer steps run first and left out of every statistic."""
    min_steps: int = 0
    """Adaptive measurement when above 0: at least this many steps, then until the mean step time
    is known to `precision`, at most `steps`. 0: exactly `steps` steps."""
    precision: float = 0.01
    """Adaptive measurement's target: the relative half-width of the mean's 95% interval."""
    window_budget_s: float = 0.0
    """Adaptive measurement: stop once the measured steps add up to this many seconds, the target
    unmet (0: no budget)..."""
    budget_precision: float = 0.10
    """... but only once the mean is known to this (--llmbench-max-interval, the bound the run is
    judged by): a budget never ends a window that its own check would then fail."""
    dtype: Dtype
    """Compute precision: bf16 or fp16 mixed precision with fp32 master weights, or fp32."""
    world_size: int = 1
    """Ranks in the training group."""
    grad_ckpt: bool = False
    """Activation (gradient) checkpointing: recompute activations in backward to save memory."""
    tier: str = "A"
    """Resource tier (fixtures/tiers.toml), recorded with the result."""
    nvme_path: str | None = None
    """Directory for NVMe offload (zero3_nvme)."""
    lr: float = 1e-3
    """AdamW's peak learning rate (config/learning_rate.py)."""
    lr_warmup: int = 0
    """Optimizer updates over which the rate rises linearly to `lr` (0: the peak from the first)."""
    seed: int = 1234
    """Seed for weights and synthetic data, the same on every rank."""
    device: Literal["cuda", "cpu"] = "cpu"
    """Where the model trains; cuda means one GPU per rank."""
    compile: bool = False
    """torch.compile each transformer block before the strategy wraps the model."""
    fused_loss: str = "none"
    """How the loss meets the LM head (FUSED_LOSSES): fused losses never hold the whole
    batch x sequence x vocabulary logits, which frees memory for a larger batch."""
    fp8: str = "none"
    """torchao float8 training recipe for the blocks' linear layers (FP8_RECIPES); on CPU it is
    emulated (a smoke test of the conversion, not a speed)."""
    attention: str = "default"
    """Attention kernel (ATTENTION_BACKENDS), held for forward and backward of every step."""
    zero_bucket: str = "default"
    """DeepSpeed's reduce and all-gather buckets (ZeRO-1 to 3), in elements: default (the
    maintainers' guidance for the model's size: config/strategy_settings.py), hf_auto or a number."""
    zero3_prefetch: str = "default"
    """ZeRO-3's stage3_prefetch_bucket_size: default, hf_auto or a number of elements."""
    zero3_persistence: str = "default"
    """ZeRO-3's stage3_param_persistence_threshold: default, hf_auto or a number of elements."""
    ddp_bucket_mb: str = "default"
    """DDP's bucket_cap_mb: default (torch's 25) or a number of MB."""
    deepspeed_config: str = ""
    """The user's DeepSpeed settings (--llmbench-deepspeed-config) as JSON, merged over the
    defaults of every DeepSpeed run; '' for none."""
    deepspeed_config_file: str | None = None
    """The file they came from."""
    profile_steps: int = 0
    """Untimed steps after the window run under torch.profiler (collectives, host-device copies)."""
    trace: bool = False
    """Keep rank 0's profiler trace of those steps beside the result (Perfetto, TensorBoard)."""
    workload: str = "causal_lm"
    """What is trained (WORKLOADS); a benchmark file sets it with its llmbench marker."""
    model_config: tuple[tuple[str, Any], ...] = ()
    """Overrides of the preset's config (--llmbench-model-config), sorted (key, value) pairs."""
    optimizer: str = "adamw_torch"
    """adamw_torch, or paged_adamw_8bit (bitsandbytes, CUDA only; the LoRA fine-tuning guide's choice)."""
    lora_rank: int = 16
    """LoRA rank r for the lora workload (alpha = 2r)."""
    data: str = "memory"
    """memory: batches made before timing; disk: seq2seq reads numbered binary shards through a
    DataLoader with workers and pinned memory, so storage speed shows in the numbers."""
    data_dir: str | None = None
    """Where disk shards are written once and reused (default: .llmbench-data/ in the results dir)."""
    data_workers: int = 2
    """DataLoader worker processes for disk data."""
    dataset_samples: int = 0
    """seq2seq: samples per epoch (0: enough for 20 steps per rank)."""
    epochs: int = 2
    """seq2seq: measured epochs."""
    warmup_epochs: int = 1
    """seq2seq: epochs run first and left out of every statistic."""
    max_epoch_steps: int = 0
    """seq2seq: measure whole epochs after `epochs` while the mean is known less well than
    `precision`, up to this many steps (0: exactly `epochs`)."""
    shard_mb: float = 128.0
    """seq2seq: target size of one disk shard in MB (the encoder-decoder benchmark's: about 128)."""
    diagnostic: str | None = None
    memory_limit_gb: float | None = None
    """--llmbench-vram-limit-gb: the memory a configuration must fit in (else the device's own)."""
    run_unfit: bool = False
    """Run a configuration predicted not to fit (plan/predict.py) instead of skipping it."""
    """The LoRA fine-tuning guide's diagnostic variant this run is, if any (baseline, optimizer,
    lora_rank, ...)."""

    def __post_init__(self) -> None:
        parse_strategy(self.name)
        for name in ("seq_len", "per_device_batch", "grad_accum", "steps", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"{name} must be a whole number of at least 1; got {value!r}.")
        if self.min_steps and not 2 <= self.min_steps <= self.steps:
            raise SpecError(
                f"min_steps {self.min_steps} must be between 2 and the step cap {self.steps}: "
                "an interval needs two steps, and the cap bounds the measurement."
            )
        if not 0 < self.precision < 1:
            raise SpecError(
                f"precision must be between 0 and 1 (a fraction of the mean); got {self.precision!r}."
            )
        if self.window_budget_s < 0:
            raise SpecError(f"window_budget_s must be 0 (none) or more; got {self.window_budget_s!r}.")
        if not isinstance(self.profile_steps, int) or self.profile_steps < 0:
            raise SpecError(f"profile_steps must be 0 or more; got {self.profile_steps!r}.")
        choices = {
            "workload": WORKLOADS,
            "optimizer": OPTIMIZERS,
            "data": DATA_SOURCES,
            "fused_loss": FUSED_LOSSES,
            "fp8": FP8_RECIPES,
            "attention": ATTENTION_BACKENDS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise SpecError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}.")
        for name in ("lora_rank", "epochs"):
            if getattr(self, name) < 1:
                raise SpecError(f"{name} must be 1 or more; got {getattr(self, name)!r}.")
        if self.data_workers < 0 or self.warmup_epochs < 0 or self.dataset_samples < 0:
            raise SpecError("data_workers, warmup_epochs and dataset_samples must be 0 or more.")
        if self.shard_mb <= 0:
            raise SpecError(f"shard_mb must be above 0; got {self.shard_mb!r}.")
        if self.data == "disk" and self.workload != "seq2seq":
            raise SpecError(
                f"disk data is read by the seq2seq workload only; {self.workload} trains on batches made "
                "in memory. Drop --llmbench-data=disk for this benchmark."
            )
        if self.trace and self.profile_steps < 1:
            raise SpecError("a profiler trace needs profiled steps: profile_steps must be 1 or more.")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SpecError(f"warmup must be a whole number of steps, 0 or more; got {self.warmup!r}.")
        if not isinstance(self.lr_warmup, int) or self.lr_warmup < 0:
            raise SpecError(
                f"lr_warmup must be a whole number of updates, 0 or more; got {self.lr_warmup!r}."
            )
        if self.dtype not in DTYPES:
            raise SpecError(f"dtype must be one of {', '.join(DTYPES)}; got {self.dtype!r}.")
        if self.offload == "nvme" and not self.nvme_path:
            raise SpecError(f"{self.name} needs a directory: pass --llmbench-nvme-path=/path/on/nvme.")
        self._check_techniques()

    def _check_techniques(self) -> None:
        """The what-if axes: where they apply, and fp8's need for compile on a GPU."""
        if self.workload == "seq2seq" and (self.fused_loss, self.fp8, self.attention) != (
            "none",
            "none",
            "default",
        ):
            raise SpecError(
                "--llmbench-fused-loss, --llmbench-fp8 and --llmbench-attention apply to the decoder "
                "workloads (causal_lm, lora); the encoder-decoder (seq2seq) trains without them. "
                "Leave them at their defaults for that benchmark."
            )
        if self.fp8 != "none" and self.device == "cuda" and not self.compile:
            raise SpecError(fp8_needs_compile(self.fp8))

    @property
    def name(self) -> str:
        """The user-facing strategy name, offload suffix included (``zero3_nvme``)."""
        return self.strategy + OFFLOAD_SUFFIX.get(self.offload, "")

    @property
    def info(self) -> StrategyInfo:
        return STRATEGIES[self.strategy]

    @property
    def tokens_per_step(self) -> int:
        """Tokens the whole group trains on in one optimizer step."""
        return self.world_size * self.per_device_batch * self.grad_accum * self.seq_len

    @property
    def samples_per_step(self) -> int:
        return self.world_size * self.per_device_batch * self.grad_accum

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        # JSON turns the (key, value) pairs into lists
        values["model_config"] = tuple(tuple(kv) for kv in values.get("model_config", ()))
        return cls(**values)

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)
