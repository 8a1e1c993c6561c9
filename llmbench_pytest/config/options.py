"""The --llmbench-* options, their ini twins, and the parsed SessionOptions.

Standard library only. Every setting has one parser, used for the command line, the ini file
and the `llmbench` marker alike, so a bad value gets the same message wherever it came from.
Precedence: command line > the test's marker > ini > default (plugin.options_for).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import deepspeed_user, strategy_settings
from .gate_bounds import GateBounds, parse_gate_bounds
from .presets import model_names, tiers
from .spec import (
    ATTENTION_BACKENDS,
    DATA_SOURCES,
    DEFAULT_STRATEGIES,
    DTYPES,
    FP8_RECIPES,
    FUSED_LOSSES,
    OPTIMIZERS,
    STRATEGIES,
    WORKLOADS,
    SpecError,
    offload_variants,
    parse_strategy,
)

if TYPE_CHECKING:
    from collections.abc import Callable


def _positive_int(raw: Any) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SpecError(f"must be a whole number; got {raw!r}") from None
    if value < 1:
        raise SpecError(f"must be 1 or more; got {value}")
    return value


def _non_negative_int(raw: Any) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SpecError(f"must be a whole number; got {raw!r}") from None
    if value < 0:
        raise SpecError(f"must be 0 or more; got {value}")
    return value


def _positive_float(raw: Any) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise SpecError(f"must be a number; got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"must be a number above 0; got {raw!r}")
    return value


def _non_negative_float(raw: Any) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise SpecError(f"must be a number; got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"must be a number, 0 or more; got {raw!r}")
    return value


def _fraction(raw: Any) -> float:
    """'10%' or '0.1' -> 0.1."""
    text = str(raw).strip()
    pct = text.endswith("%")
    value = _positive_float(text.rstrip("%"))
    return value / 100 if pct else value


def _precision(raw: Any) -> float:
    """A relative half-width below 100%: '1%' or '0.01' -> 0.01."""
    value = _fraction(raw)
    if value >= 1:
        raise SpecError(f"must be below 1 (100 percent); got {raw!r}: pass 0.01 or 1% for +-1%")
    return value


def _share(raw: Any) -> float:
    """A fraction of linear scaling, read as _fraction reads it, at most 1 (100%)."""
    value = _fraction(raw)
    if value > 1:
        raise SpecError(f"must be at most 1 (100 percent); got {raw!r}: write 0.6 or 60%")
    return value


def _half_width(raw: Any) -> float:
    """The half-width of a 95% interval relative to its mean, read as _fraction reads it, at most 1:
    an interval wider than the mean itself reaches below zero and would accept any run."""
    value = _fraction(raw)
    if value > 1:
        raise SpecError(
            f"must be at most 1 (100 percent of the mean): an interval of +-{value:.0%} reaches below "
            f"zero and accepts any run; got {raw!r}: write 0.1 or 10%"
        )
    return value


def _items(raw: Any) -> list[str]:
    if isinstance(raw, (list, tuple)):
        return [str(x).strip() for x in raw if str(x).strip()]
    return [x.strip() for x in str(raw).replace(" ", ",").split(",") if x.strip()]


def _strategies(raw: Any) -> tuple[str, ...]:
    names = _items(raw)
    if names == ["all"]:
        return (*STRATEGIES, *offload_variants())
    if not names:
        raise SpecError("needs at least one strategy name")
    for name in names:
        parse_strategy(name)  # raises with the list of choices
    return tuple(dict.fromkeys(names))


def _data_sources(raw: Any) -> tuple[str, ...]:
    items = _items(raw)
    if not items:
        raise SpecError(f"needs a data source: {', '.join(DATA_SOURCES)}, or both comma-separated")
    return tuple(dict.fromkeys(_choice(*DATA_SOURCES)(x) for x in items))


def _axis(*choices: str) -> Callable[[Any], tuple[str, ...]]:
    """A what-if axis: one value or several, comma-separated; each runs as its own configuration."""
    one = _choice(*choices)

    def parse(raw: Any) -> tuple[str, ...]:
        items = _items(raw)
        if not items:
            raise SpecError(f"needs one or more of {', '.join(choices)}, comma-separated")
        return tuple(dict.fromkeys(one(x) for x in items))

    return parse


def _setting_axis(field: str) -> Callable[[Any], tuple[str, ...]]:
    """A strategy setting's axis (config/strategy_settings.py): values each run as a configuration."""
    return functools.partial(strategy_settings.axis_values, strategy_settings.BY_FIELD[field])


def _seq_lens(raw: Any) -> tuple[int, ...]:
    items = _items(raw)
    if not items:
        raise SpecError("needs at least one sequence length")
    return tuple(dict.fromkeys(_positive_int(x) for x in items))


def _world_sizes(raw: Any) -> tuple[int, ...] | None:
    """'auto' -> None (powers of two up to the devices present); else distinct positive ints."""
    items = _items(raw)
    if items == ["auto"]:
        return None
    if not items:
        raise SpecError("needs world sizes such as 1,2,4 or 'auto'")
    return tuple(sorted(dict.fromkeys(_positive_int(x) for x in items)))


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip()
        if value not in choices:
            raise SpecError(f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    return parse


def _tier(raw: Any) -> str:
    return _choice("auto", *tiers())(raw)


def _model(raw: Any) -> str:
    value = str(raw).strip()
    if not value:
        raise SpecError(f"needs a preset ({', '.join(model_names())}) or a local config path")
    return value  # resolved (and refused if unknown) once, in the matrix, with the full message


def _lanes(raw: Any) -> str:
    """auto, no, or a positive whole number (kept as text)."""
    value = str(raw).strip().lower()
    if value in ("auto", "no"):
        return value
    try:
        return str(_positive_int(value))
    except SpecError:
        raise SpecError(f"must be auto, no or a whole number of lanes (1 or more); got {raw!r}") from None


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"must be true or false; got {raw!r}")


def _model_config(raw: Any) -> tuple[tuple[str, Any], ...]:
    """'num_hidden_layers=8,rope_theta=5e5' -> (('num_hidden_layers', 8), ('rope_theta', 500000.0))."""
    if isinstance(raw, dict):
        return tuple(sorted(raw.items()))
    pairs = {}
    for item in _items(raw):
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise SpecError(f"expected key=value pairs such as num_hidden_layers=8; got {item!r}")
        try:
            pairs[key] = json.loads(value)
        except json.JSONDecodeError:
            pairs[key] = value
    return tuple(sorted(pairs.items()))


def _text(raw: Any) -> str:
    value = str(raw).strip()
    if not value:
        raise SpecError("needs a value")
    return value


def _path(raw: Any) -> str:
    return str(Path(str(raw).strip()).expanduser())


@dataclass(frozen=True)
class Setting:
    name: str
    help: str
    parse: Callable[[Any], Any]
    metavar: str = "VALUE"
    flag: bool = False
    """A switch on the command line (--llmbench-grad-ckpt), a boolean in ini and marker."""

    @property
    def option(self) -> str:
        return "--llmbench-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "llmbench_" + self.name


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "strategies",
        f"comma-separated strategies to benchmark, or 'all' (default: {','.join(DEFAULT_STRATEGIES)}). "
        f"Choices: {', '.join(STRATEGIES)}; offload variants: {', '.join(offload_variants())}.",
        _strategies,
        "NAMES",
    ),
    Setting(
        "model",
        f"model preset ({', '.join(model_names())}) or a local config.json file/directory; "
        "nothing is downloaded (default: llama-tiny on CPU, the tier's preset on GPU).",
        _model,
        "PRESET|PATH",
    ),
    Setting("seq_lens", "comma-separated sequence lengths (default: the preset's).", _seq_lens, "N[,N...]"),
    Setting("batch", "sequences per rank per micro-step (default: the preset's).", _positive_int, "N"),
    Setting("grad_accum", "micro-steps per optimizer step (default: 1).", _positive_int, "N"),
    Setting(
        "steps",
        "measure exactly this many optimizer steps instead of measuring until the mean step time is "
        "known to --llmbench-precision (default: adaptive; the encoder-decoder counts epochs).",
        _positive_int,
        "N",
    ),
    Setting(
        "warmup",
        "unmeasured steps first (default: 2; 3 for ZeRO-3 on a GPU; the encoder-decoder: warm-up epochs).",
        _non_negative_int,
        "N",
    ),
    Setting(
        "precision",
        "adaptive measurement: measure until the 95% confidence interval of the mean step time (slowest "
        "rank per step, outliers clipped, correlated steps allowed for) is within +- this fraction: 0.01 "
        "or 1 percent (default: 0.01).",
        _precision,
        "FRACTION",
    ),
    Setting(
        "min_steps",
        "adaptive measurement: measure at least this many steps (default: 10 on GPU, 6 on CPU).",
        _positive_int,
        "N",
    ),
    Setting(
        "max_steps",
        "adaptive measurement: stop after this many steps even if the precision is not reached; the "
        "result says which it was (default: 100 on GPU, 12 on CPU). With a window budget, a mean not "
        "yet known within --llmbench-max-interval here is measured on while the budget lasts (up to 10 "
        "times this many steps).",
        _positive_int,
        "N",
    ),
    Setting(
        "window_budget",
        "adaptive measurement: stop once the measured steps add up to this many seconds, even if the "
        "precision is not reached, when the mean is known within --llmbench-max-interval or "
        "--llmbench-max-steps is reached too; the result says which stopped it and the precision "
        "reached; 0 for no budget (default: 20 on GPU, none on CPU).",
        _non_negative_float,
        "SECONDS",
    ),
    Setting(
        "isolate",
        "start a fresh torchrun group for every configuration instead of keeping the ranks of a world "
        "size warm from one configuration to the next (launcher mode).",
        _bool,
        flag=True,
    ),
    Setting(
        "side_by_side",
        "on a node with more GPUs than a world size needs, train several configurations of that world "
        "size at once, each on its own GPUs and its own share of the host's cores (launcher mode): auto, "
        "as many as the GPUs allow (default); no, one at a time; N, at most N at once. CPU offload, "
        "NVMe offload and data from disk always run alone; result.json's side_by_side says how each "
        "run shared the node. A session setting: a test's marker does not change it; off with "
        "--llmbench-repeat above 1 or --llmbench-find-batch.",
        _lanes,
        "auto|no|N",
    ),
    Setting(
        "dtype",
        "precision: bf16, fp16 (mixed, fp32 master weights) or fp32 (default: bf16 on GPU, fp32 on CPU).",
        _choice("auto", *DTYPES),
        "DTYPE",
    ),
    Setting("grad_ckpt", "activation checkpointing: recompute activations in backward.", _bool, flag=True),
    Setting(
        "run_unfit",
        "run a configuration whose predicted peak memory (llmbench plan's) exceeds the GPU's memory, or "
        "--llmbench-vram-limit-gb where given, by more than 10%, instead of skipping it with the "
        "prediction as the reason (GPU only: on a CPU nothing is skipped).",
        _bool,
        flag=True,
    ),
    Setting(
        "compile",
        "torch.compile each transformer block before the strategy wraps the model (recorded in the result).",
        _bool,
        flag=True,
    ),
    Setting(
        "fused_loss",
        "fused linear cross-entropy: none (the model's loss over full logits), chunked (llmbench's, a "
        "chunk of rows at a time; compiled with --llmbench-compile; runs everywhere) or liger "
        "(liger-kernel's, CUDA only); comma-separated values each run (default: none).",
        _axis(*FUSED_LOSSES),
        "KIND[,KIND...]",
    ),
    Setting(
        "fp8",
        "torchao float8 training of the blocks' linear layers: none, tensorwise or rowwise (lm_head "
        "stays 16-bit). GPUs of compute capability 8.9 or more, with --llmbench-compile; on CPU emulated, "
        "a smoke test only; comma-separated values each run (default: none).",
        _axis(*FP8_RECIPES),
        "RECIPE[,RECIPE...]",
    ),
    Setting(
        "attention",
        "attention kernel for forward and backward: default (SDPA's choice), flash, cudnn, efficient, "
        "math (that SDPA backend only) or fa2 (the flash-attn package); one the device cannot run is "
        "skipped with the reason; comma-separated values each run (default: default).",
        _axis(*ATTENTION_BACKENDS),
        "BACKEND[,BACKEND...]",
    ),
    Setting(
        "zero_bucket",
        "DeepSpeed's reduce and all-gather buckets for ZeRO-1, 2 and 3, in elements: default (ZeRO-3: "
        "DeepSpeed's guidance, 5e8, at most the model's parameters; ZeRO-1 and 2: hidden size squared), "
        "hf_auto (the Hugging Face Trainer's 'auto': hidden size squared) or a number; comma-separated "
        "values each run.",
        _setting_axis("zero_bucket"),
        "default|hf_auto|N[,...]",
    ),
    Setting(
        "zero3_prefetch",
        "ZeRO-3's prefetch bucket (stage3_prefetch_bucket_size), in elements: default (5e8, at most the "
        "model's parameters), hf_auto (0.9 x hidden size squared) or a number; comma-separated values "
        "each run.",
        _setting_axis("zero3_prefetch"),
        "default|hf_auto|N[,...]",
    ),
    Setting(
        "zero3_persistence",
        "ZeRO-3 keeps parameters smaller than this many elements whole on every rank "
        "(stage3_param_persistence_threshold): default (1e6, at most a thousandth of the model), hf_auto "
        "(10 x hidden size) or a number; comma-separated values each run.",
        _setting_axis("zero3_persistence"),
        "default|hf_auto|N[,...]",
    ),
    Setting(
        "ddp_bucket_mb",
        "DDP's gradient bucket (bucket_cap_mb): default (torch's 25) or a number of MB; comma-separated "
        "values each run.",
        _setting_axis("ddp_bucket_mb"),
        "default|MB[,...]",
    ),
    Setting(
        "deepspeed_config",
        "a DeepSpeed config JSON merged over the suite's defaults in every DeepSpeed run and recorded in "
        "result.json; what the suite sets for every strategy (batch, precision, optimizer, offload, "
        "another stage than the strategy's) is refused, 'auto' values are left to the suite.",
        deepspeed_user.load,
        "FILE",
    ),
    Setting(
        "profile",
        "keep a torch.profiler trace of two untimed steps after the window from rank 0 "
        "(rank0.pt.trace.json beside the result; open in ui.perfetto.dev or TensorBoard), in every run. "
        "Without it those steps run only where the report uses them: GPU runs at 2+ ranks (time in "
        "collectives) or with offload (host-device copies).",
        _bool,
        flag=True,
    ),
    Setting("results_dir", "where result.json files and logs go (default: results).", _path, "DIR"),
    Setting(
        "vram_limit_gb",
        "peak memory limit for the memory check, in GB: peak reserved GPU memory, or on CPU the "
        "process's peak RSS (default: the GPU's own memory; a tier's, fixtures/tiers.toml A 24 or "
        "B 80, where --llmbench-tier names one, and on CPU).",
        _positive_float,
        "GB",
    ),
    Setting(
        "max_cv",
        "step time's variation between runs: the largest coefficient of variation of the repeats' "
        "tokens/s (--llmbench-repeat 2 or more) or of the epochs' wall times (5 epochs or more) that the "
        "step_time_cv check accepts: 0.1 or 10 percent (default: 0.1). A CV above it fails only when "
        "the few values show it beyond doubt (its 95% lower confidence limit above the bound); otherwise "
        "no verdict. Within one run see --llmbench-max-interval.",
        _fraction,
        "CV",
    ),
    Setting(
        "nvme_path", "directory on NVMe for zero3_nvme (that strategy is skipped without it).", _path, "DIR"
    ),
    Setting(
        "timeout",
        "seconds any collective may wait before the run fails instead of hanging (default: 600).",
        _positive_float,
        "SECONDS",
    ),
    Setting(
        "wait_for_gpus",
        "before the first configuration the session looks at its GPUs; if another process holds one, "
        "wait up to this many seconds for them to be free, saying what it waits for, instead of "
        "refusing to start (default: refuse at once).",
        _non_negative_float,
        "SECONDS",
    ),
    Setting(
        "ops_ahead",
        "build the DeepSpeed ops the selected configurations need (CPU Adam for offload, async I/O for "
        "NVMe) in the background from the session's start, beside the configurations that need none; "
        "the build's time is reported apart. auto: on a GPU only (default); yes: on any device; no: each "
        "rank builds an op when it first needs it.",
        _choice("auto", "yes", "no"),
        "auto|yes|no",
    ),
    Setting(
        "trace_ahead",
        "trace the steps the selected configurations' peak predictions need in the background from the "
        "session's start, while the ranks start (only those not kept from an earlier session); auto: on a "
        "GPU only (default); yes: on any device; no: each rank traces its own before it builds its model.",
        _choice("auto", "yes", "no"),
        "auto|yes|no",
    ),
    Setting(
        "device",
        "where to train: auto, cpu or cuda (default: auto).",
        _choice("auto", "cpu", "cuda"),
        "DEVICE",
    ),
    Setting(
        "tier",
        "resource tier from fixtures/tiers.toml: auto, A (standard) or B (high-memory): the default "
        "model and, where named, the memory check's limit (default: auto: the GPU's own memory).",
        _tier,
        "TIER",
    ),
    Setting(
        "peak_tflops",
        "the GPU's peak dense TFLOP/s for MFU, for a GPU fixtures/gpus.toml does not know.",
        _positive_float,
        "TFLOPS",
    ),
    Setting(
        "world_sizes",
        "world sizes to run each benchmark at when pytest is not under torchrun, e.g. 1,2,4, or auto: "
        "powers of two up to the GPUs present, 1,2 on CPU (default: auto). Each runs as its own "
        "torchrun group. Under torchrun the world size is torchrun's.",
        _world_sizes,
        "N[,N...]|auto",
    ),
    Setting(
        "launch",
        "how a benchmark starts its ranks without torchrun: torchrun (torchrun groups outside this "
        "pytest process, one per world size, whose ranks stay warm from one configuration to the next; "
        "--llmbench-isolate starts one per configuration) or inprocess (world size 1 inside this pytest "
        "process, for debuggers and profilers) (default: torchrun).",
        _choice("torchrun", "inprocess"),
        "HOW",
    ),
    Setting(
        "repeat",
        "run each configuration this many times; the result reports mean and standard deviation "
        "(default: 1).",
        _positive_int,
        "N",
    ),
    Setting(
        "max_repeat_spread",
        "largest deviation of one repeat's tokens/s from the repeats' mean that the consistency "
        "check accepts: 0.05 or 5 percent (default: 0.05).",
        _fraction,
        "FRACTION",
    ),
    Setting(
        "max_interval",
        "how well a run's mean step time must be known: the largest half-width of its 95% confidence "
        "interval, relative to the mean, that the mean_interval check accepts on a GPU (on CPU too when "
        "given on the command line, with the caveat that CPU timings are smoke): 0.1 or 10 percent "
        "(default: 0.1, the 10 percent the validation checks allow between runs).",
        _half_width,
        "FRACTION",
    ),
    Setting(
        "min_scaling",
        "the least scaling efficiency, T(N) / ((N / N0) T(N0)) against the same configuration at the "
        "smallest world size N0 of the session, that the scaling check accepts on a GPU (on CPU too when "
        "given on the command line, with the caveat that CPU timings are smoke): 0.6 or 60 percent "
        "(default: 0.6: the pretraining benchmark's specification says to investigate below 30 percent at "
        "4 GPUs, in its convention that puts 2 GPUs at 50 percent).",
        _share,
        "FRACTION",
    ),
    Setting(
        "report",
        "at the end of the session write summary/metrics.csv, BENCHMARK_REPORT.md and plots/ for its "
        "runs into the results directory, and print the summary table.",
        _bool,
        flag=True,
    ),
    Setting(
        "gate",
        "at the end of the session compare its runs with a saved pytest-benchmark run (a counter such "
        "as 0001, 'latest', or a path; found before anything trains) and fail the session on a "
        "regression in tokens/s, step time or memory: significant at alpha and beyond the bound.",
        _text,
        "SAVED_RUN",
    ),
    Setting(
        "gate_bounds",
        "bounds for --llmbench-gate, e.g. tokens=5%,step_time=5%,memory=5%,alpha=0.01,history=20,"
        "inconclusive=fail (default: all 5%, alpha 0.01, no history, inconclusive changes reported, "
        "not failed).",
        parse_gate_bounds,
        "BOUNDS",
    ),
    Setting(
        "workload",
        f"what the benchmark trains: {', '.join(WORKLOADS)} (default: causal_lm). Each benchmark file sets "
        "its own with its llmbench marker.",
        _choice(*WORKLOADS),
        "WORKLOAD",
    ),
    Setting(
        "model_config",
        "override values of the model preset's config, e.g. num_hidden_layers=8,hidden_size=1024 "
        "(encoder-decoder: d_model=512,nhead=8,num_encoder_layers=6,num_decoder_layers=6,"
        "dim_feedforward=2048).",
        _model_config,
        "KEY=VALUE[,...]",
    ),
    Setting(
        "optimizer",
        f"optimizer: {', '.join(OPTIMIZERS)} (paged_adamw_8bit needs bitsandbytes and a GPU) "
        "(default: adamw_torch).",
        _choice(*OPTIMIZERS),
        "NAME",
    ),
    Setting("lora_rank", "LoRA rank r for the lora workload; alpha is 2r (default: 16).", _positive_int, "R"),
    Setting(
        "data",
        "seq2seq data source(s): memory (samples held in this process) or disk (numbered binary shards of "
        "about --llmbench-shard-mb, written once and reused, read cold each epoch), both through a "
        "DataLoader; 'memory,disk' runs both (default: memory, the encoder-decoder benchmark: both). "
        "Other workloads train from memory.",
        _data_sources,
        "SOURCE[,SOURCE]",
    ),
    Setting(
        "data_dir",
        "where disk shards live: a local SSD, NVMe or network mount to compare "
        "(default: RESULTS_DIR/.llmbench-data).",
        _path,
        "DIR",
    ),
    Setting(
        "data_workers", "DataLoader worker processes for disk data (default: 2).", _non_negative_int, "N"
    ),
    Setting(
        "dataset_samples",
        "seq2seq samples per epoch (default: enough for 20 steps per rank).",
        _positive_int,
        "N",
    ),
    Setting(
        "epochs",
        "seq2seq measured epochs (default: 2, then more whole epochs while the mean step time is "
        "known less well than --llmbench-precision, up to --llmbench-max-steps; given here, exactly "
        "N. The step-time check compares their wall times, so with 1 it does not apply).",
        _positive_int,
        "N",
    ),
    Setting(
        "warmup_epochs", "seq2seq epochs run first and not measured (default: 1).", _non_negative_int, "N"
    ),
    Setting("shard_mb", "target size of one disk shard in MB (default: 128).", _positive_float, "MB"),
    Setting(
        "price",
        "price of one GPU-hour in dollars: results then carry the cost per 1K samples and per 1M tokens.",
        _positive_float,
        "USD",
    ),
    Setting(
        "diagnostic",
        "run the LoRA fine-tuning guide's diagnostic matrix for each configuration: the baseline, the "
        "other optimizer, half the LoRA rank, half the sequence, half the sequence with twice the batch, "
        "and fp16.",
        _bool,
        flag=True,
    ),
    Setting(
        "every_size",
        "run the LoRA diagnostic matrix (--llmbench-diagnostic) and the encoder-decoder's second data "
        "source (the second of --llmbench-data) at every world size. By default they run at world size 1 "
        "only, where their questions are answered (which variant fits and what it costs; what reading from "
        "disk costs a step); naming the sizes with --llmbench-world-sizes runs them at those sizes too.",
        _bool,
        flag=True,
    ),
    Setting(
        "find_batch",
        "per strategy, search the largest per-device batch that fits and the one with the highest "
        "tokens/s (doubling, then bisecting; an out-of-memory trial is a data point), then train at the "
        "fastest.",
        _bool,
        flag=True,
    ),
    Setting(
        "max_batch",
        "the largest per-device batch --llmbench-find-batch tries (default: 256; on CPU, where nothing "
        "runs out of memory, 16).",
        _positive_int,
        "N",
    ),
    Setting(
        "lr",
        "AdamW learning rate (default: for pre-training, the peak rate GPT-3 used at the model's size, "
        "interpolated: 2.3e-4 for llama-1b, 1.2e-4 for llama-7b, at most 1e-3; for LoRA and the "
        "encoder-decoder, 1e-3).",
        _positive_float,
        "LR",
    ),
    Setting(
        "lr_warmup",
        "optimizer updates over which the learning rate rises linearly to its peak, as pre-training "
        "starts (default: for pre-training, 2 / (1 - beta2) = 40, Ma & Yarats' rule for AdamW; for LoRA "
        "and the encoder-decoder, 0: the peak from the first update). It moves how the loss falls, not "
        "the speed.",
        _non_negative_int,
        "N",
    ),
    Setting("seed", "seed for weights and data (default: 1234).", _non_negative_int, "N"),
)
BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class SessionOptions:
    """Parsed settings; None means 'pick for the hardware found'."""

    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    model: str | None = None
    seq_lens: tuple[int, ...] | None = None
    batch: int | None = None
    grad_accum: int = 1
    steps: int | None = None
    warmup: int | None = None
    precision: float = 0.01
    min_steps: int | None = None
    max_steps: int | None = None
    window_budget: float | None = None
    isolate: bool = False
    side_by_side: str = "auto"
    dtype: str = "auto"
    grad_ckpt: bool = False
    run_unfit: bool = False
    compile: bool = False
    fused_loss: tuple[str, ...] = ("none",)
    fp8: tuple[str, ...] = ("none",)
    attention: tuple[str, ...] = ("default",)
    zero_bucket: tuple[str, ...] = ("default",)
    zero3_prefetch: tuple[str, ...] = ("default",)
    zero3_persistence: tuple[str, ...] = ("default",)
    ddp_bucket_mb: tuple[str, ...] = ("default",)
    deepspeed_config: tuple[str, str] | None = None
    """(path, its settings as JSON) from --llmbench-deepspeed-config."""
    profile: bool = False
    results_dir: str = "results"
    vram_limit_gb: float | None = None
    max_cv: float = 0.10
    nvme_path: str | None = None
    timeout: float = 600.0
    device: str = "auto"
    tier: str = "auto"
    peak_tflops: float | None = None
    world_sizes: tuple[int, ...] | None = None
    launch: str = "torchrun"
    repeat: int = 1
    max_repeat_spread: float = 0.05
    max_interval: float = 0.10
    min_scaling: float = 0.60
    report: bool = False
    gate: str | None = None
    gate_bounds: GateBounds | None = None
    workload: str = "causal_lm"
    model_config: tuple[tuple[str, Any], ...] = ()
    optimizer: str = "adamw_torch"
    lora_rank: int = 16
    data: tuple[str, ...] = ("memory",)
    data_dir: str | None = None
    data_workers: int = 2
    dataset_samples: int = 0
    epochs: int = 2
    warmup_epochs: int = 1
    shard_mb: float = 128.0
    price: float | None = None
    diagnostic: bool = False
    every_size: bool = False
    find_batch: bool = False
    max_batch: int | None = None
    lr: float | None = None
    lr_warmup: int | None = None
    seed: int = 1234
    wait_for_gpus: float | None = None
    ops_ahead: str = "auto"
    trace_ahead: str = "auto"
    explicit: tuple[str, ...] = ()
    """The settings passed on the command line (PYTEST_ADDOPTS included), in the order given. A
    timing bound given there is applied on CPU too, with the caveat that CPU timings are smoke
    (checks/smoke.py); one from the ini file is a standing policy, which a CPU run of the same
    project, like the defaults, records without a verdict."""

    def with_values(self, values: dict[str, Any], origin: str) -> SessionOptions:
        """Apply raw values (from ini, command line or marker), parsing each; errors name the origin."""
        parsed = {}
        for key, raw in values.items():
            setting = BY_NAME.get(key)
            if setting is None:
                raise SpecError(f"{origin}: unknown llmbench setting {key!r}; known: {', '.join(BY_NAME)}")
            try:
                parsed[key] = setting.parse(raw)
            except SpecError as exc:
                where = {"command line": setting.option, "ini": setting.ini}.get(origin, f"{origin} {key}=")
                raise SpecError(f"{where}: {exc}") from None
        if origin == "command line":
            parsed["explicit"] = tuple(dict.fromkeys((*self.explicit, *values)))
        return dataclasses.replace(self, **parsed)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
