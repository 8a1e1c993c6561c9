"""From options, marker and hardware to the list of runs a benchmark test is parametrised with.

Standard library only. Every refusal happens here, before anything trains: an unknown preset,
a sequence longer than the model allows, a missing NVMe directory. A strategy the session
cannot run for a reason outside the user's command (no NVMe directory given) becomes a skipped
test with that reason instead.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.datasets import check_data_dir, with_epoch_steps
from ..config.learning_rate import default_lr, default_lr_warmup
from ..config.presets import (
    ENCDEC_CONFIG_KEYS,
    ModelPreset,
    default_model,
    model_names,
    params_of,
    resolve_model,
    tier_for_memory,
    tiers,
)
from ..config.spec import DEFAULT_STRATEGIES, RunSpec, SpecError, parse_strategy
from .technique_axes import check_technique_options, technique_combos, technique_skip

if TYPE_CHECKING:
    from ..config.hardware import Hardware
    from ..config.options import SessionOptions

CPU_WARMUP, CPU_MIN_STEPS, CPU_MAX_STEPS = 2, 6, 12
GPU_WARMUP, GPU_MIN_STEPS, GPU_MAX_STEPS = 2, 10, 100
GPU_WARMUP_ZERO3 = 3
"""Warm-up: 19 step-measured runs of the default suite on 1x H100 (pretrain, LoRA, the diagnostic
matrix; docs/results/2026-11-26-h100-whole-suite) took 1.0-5.3x their settled step on the first
warm-up step and ZeRO-3's second 1.5-2.8x. Over the 237 runs in docs/results that warmed up for
three steps (`python3 tools/warmup_steps.py docs/results --by-strategy --warmup 2`; the table is in
docs/results/2026-11-26-h100-pretrain-fresh-host-4), the third warm-up step, the one a warm-up of
two would measure first, lay beyond +-10% of its run's median in 0-4% of the runs of ddp, FSDP,
zero1 and zero2 (their window's own steps: 0.3-5.6%); zero0's 3 of 17 were faster than their
median (the census's step, its own time taken out), zero2_offload's 3 of 18 at 1.12-1.18x, as
often as its first measured step after three (17%). ZeRO-3's third lay beyond in 52% of its runs
against 29% of its window's steps, zero3_offload's in 27% against 18%: ZeRO-3 (offload or not)
keeps a third step; a third step bought the others nothing the window's own noise does not match.

Adaptive measurement (analysis/stats.mean_interval): at least MIN steps, then until the mean
step time is known to --llmbench-precision, at most MAX. A GPU step of a 1B model is steady to a
fraction of a percent, so 10 to 20 steps usually reach +-1%; CPU steps on a shared machine swing by
tens of percent, so the CPU cap keeps the matrix short and the result says the precision reached."""
GPU_WINDOW_BUDGET_S = 20.0
"""Seconds of measured steps after which an adaptive GPU window stops with the precision it has
(once that is within --llmbench-max-interval). Chosen by replaying the step times of the GPU runs
in docs/results under each budget (tools/window_budget.py; docs/results/2026-11-25-window-budget):
the smallest budget that changed no ranking of strategies; steady configurations reach 1% long
before it. 3 of the 17 windows it stopped there (drifting ZeRO-3 runs) lay outside their own
reported precision of the whole 100-step window. No budget on a CPU, where the step cap is small."""
PROFILED_STEPS = 2
"""Untimed steps under the profiler after the window where time in collectives is read, a figure
two steps average (profile_steps_for)."""
COUNTED_STEPS = 1
"""Profiled steps where only what a step does is read (bytes copied between host and device,
which attention kernel ran): every step does the same, and an offload step under the profiler
took 1.3-1.7 s on 1x H100 (2026-11-26)."""


def warmup_for(opts: SessionOptions, cuda: bool, zero_stage: int | None) -> int:
    """Unmeasured steps before the window: --llmbench-warmup, else GPU_WARMUP (ZeRO-3's
    GPU_WARMUP_ZERO3) on a GPU and CPU_WARMUP on a CPU."""
    if opts.warmup is not None:
        return opts.warmup
    if not cuda:
        return CPU_WARMUP
    return GPU_WARMUP_ZERO3 if zero_stage == 3 else GPU_WARMUP


def profile_steps_for(opts: SessionOptions, cuda: bool, world_size: int, offload: str) -> int:
    """Profiled steps run where the report shows what they measure: time in collectives and its
    exposed part (world size 2 or more on a GPU), the host-device traffic of offload (a GPU), the
    attention kernels that ran where --llmbench-attention asks for a kernel (a GPU: which one
    SDPA ran, the default's included, is only seen in the kernels' names); always with
    --llmbench-profile. A one-GPU run without offload has no collective, and its input copies are
    counted in the window without a profiler."""
    if opts.profile:
        return PROFILED_STEPS
    if not cuda:
        return 0
    if world_size >= 2:
        return PROFILED_STEPS
    return COUNTED_STEPS if offload != "none" or opts.attention != ("default",) else 0


def _measurement_fields(opts: SessionOptions, cuda: bool) -> dict[str, Any]:
    """steps, min_steps and precision: a fixed count with --llmbench-steps, else adaptive."""
    adaptive = {"min_steps": opts.min_steps, "max_steps": opts.max_steps, "window_budget": opts.window_budget}
    given = [f"--llmbench-{k.replace('_', '-')}={v}" for k, v in adaptive.items() if v is not None]
    budget = opts.window_budget if opts.window_budget is not None else (GPU_WINDOW_BUDGET_S if cuda else 0.0)
    if opts.workload == "seq2seq":  # measured in epochs: the dataset decides the steps (with_epoch_steps)
        # more epochs while the precision is not reached, up to the adaptive cap, and past it while
        # the mean is known worse than the check's bound and the window's budget lasts
        # (worker/epoch_loop.py); epochs given on the command line, or a fixed count
        # (--llmbench-steps), are exactly that many
        fixed = opts.steps or "epochs" in opts.explicit
        cap = 0 if fixed else opts.max_steps or (GPU_MAX_STEPS if cuda else CPU_MAX_STEPS)
        return {"steps": opts.steps or 1, "min_steps": 0, "precision": opts.precision, "max_epoch_steps": cap,
                "window_budget_s": 0.0 if fixed else budget,
                "budget_precision": opts.max_interval}  # fmt: skip
    if opts.steps:
        if given:
            raise SpecError(
                f"--llmbench-steps={opts.steps} measures a fixed count; {' and '.join(given)} bound(s) "
                "adaptive measurement. Pass one or the other."
            )
        return {"steps": opts.steps, "min_steps": 0, "precision": opts.precision}
    low = opts.min_steps or (GPU_MIN_STEPS if cuda else CPU_MIN_STEPS)
    cap = opts.max_steps or (GPU_MAX_STEPS if cuda else CPU_MAX_STEPS)
    if low > cap:
        raise SpecError(
            f"adaptive measurement needs --llmbench-min-steps ({low}) <= --llmbench-max-steps ({cap}): "
            f"raise --llmbench-max-steps to {low} or more, or lower --llmbench-min-steps."
        )
    return {"steps": cap, "min_steps": max(2, low), "precision": opts.precision, "window_budget_s": budget,
            "budget_precision": opts.max_interval}  # fmt: skip


@dataclass(frozen=True)
class MatrixEntry:
    id: str
    spec: RunSpec | None
    skip: str | None = None
    wrong_model: bool = False
    """Skipped because the session's model cannot train this benchmark's workload: the plugin
    refuses the session instead when no selected benchmark can use that model."""


def resolve_tier(opts: SessionOptions, hw: Hardware) -> str:
    if opts.tier != "auto":
        return opts.tier
    return tier_for_memory(hw.device_gib if hw.device == "cuda" else None).name


def world_sizes(opts: SessionOptions, hw: Hardware, mode: str, torchrun_world: int) -> list[int]:
    """The world sizes each benchmark runs at: torchrun's under torchrun, else the option's."""
    if mode == "in-rank":
        return [torchrun_world]
    if mode == "in-process":
        if opts.world_sizes not in (None, (1,)):
            given = ",".join(map(str, opts.world_sizes or ()))
            raise SpecError(
                f"--llmbench-launch=inprocess runs world size 1 only (this pytest process is the one "
                f"rank); got --llmbench-world-sizes={given}. Drop one of the two options."
            )
        return [1]
    if opts.world_sizes:
        return list(opts.world_sizes)
    if hw.device == "cuda":
        return [n for n in (1, 2, 4, 8, 16, 32, 64) if n <= hw.gpu_count]
    return [1, 2] if hw.cpu_cores >= 2 else [1]


def _too_big(world_size: int, hw: Hardware) -> str | None:
    if world_size <= hw.devices:
        return None
    what = "GPUs" if hw.device == "cuda" else "CPU cores"
    share = hw.share
    if share is None or world_size > share.node_devices:
        has = share.node_devices if share else hw.devices
        return f"world size {world_size} needs {world_size} {what} (one per rank); this machine has {has}"
    # the node has enough, but pytest-xdist split it: name the worker count that would fit
    fit = share.node_devices // world_size
    fix = f"run with fewer workers, e.g. -n {fit}" if fit > 1 else "run it without -n"
    # the same words in every worker, so pytest's summary folds them into one line
    return (
        f"world size {world_size} needs {world_size} {what} (one per rank); each of the {share.workers} "
        f"pytest-xdist workers owns {hw.devices} of this machine's {share.node_devices}: {fix}"
    )


def optimizer_unavailable(optimizer: str, offload: str, hw: Hardware) -> str | None:
    """Why this machine cannot run the optimizer (a skip reason), or None."""
    if optimizer != "paged_adamw_8bit":
        return None
    if hw.device != "cuda":
        return "paged_adamw_8bit (bitsandbytes) pages optimizer state between GPU and host: needs a GPU"
    if importlib.util.find_spec("bitsandbytes") is None:
        return "paged_adamw_8bit needs bitsandbytes: pip install bitsandbytes"
    if offload != "none":
        return "paged_adamw_8bit replaces DeepSpeed's optimizer; offload needs DeepSpeed's CPU Adam"
    return None


def workload_model_mismatch(workload: str, name: str, architecture: str) -> str | None:
    """Why the model cannot train the workload (the encoder-decoder workload trains encdec
    presets only, and the others never do), naming the fix; None when it can."""
    encdec = [n for n in model_names() if resolve_model(n).architecture == "encdec"]
    if workload == "seq2seq" and architecture != "encdec":
        return (
            f"the seq2seq workload trains the encoder-decoder benchmark's model; {name!r} is a "
            "decoder-only model. "
            f"Pick an encoder-decoder preset: --llmbench-model={' or '.join(encdec)}."
        )
    if workload != "seq2seq" and architecture == "encdec":
        return (
            f"{name!r} is an encoder-decoder: the {workload} workload trains decoder-only models. Run it "
            "with the seq2seq workload (benchmarks/test_encoder_decoder.py, or --llmbench-workload=seq2seq) "
            "or pick another --llmbench-model."
        )
    return None


def check_encdec_config(name: str, config: dict[str, Any]) -> None:
    """The encoder-decoder benchmark's shape rules, before any rank starts: every size a positive
    whole number, and the heads dividing the model width."""
    for key in ENCDEC_CONFIG_KEYS:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name}: {key} must be a whole number of at least 1; got {value!r}.")
    if config["d_model"] % config["nhead"]:
        raise SpecError(
            f"{name}: nhead {config['nhead']} must divide d_model {config['d_model']}: pick nhead from "
            f"{', '.join(str(h) for h in range(1, 33) if config['d_model'] % h == 0)}."
        )


def diagnostic_variants(base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The LoRA fine-tuning guide's diagnostic matrix around one configuration: each variant changes
    one knob (the fifth, two), so its speed-up over the baseline says whether that knob is the
    bottleneck."""
    other_opt = "paged_adamw_8bit" if base["optimizer"] == "adamw_torch" else "adamw_torch"
    other_dtype = "fp16" if base["dtype"] != "fp16" else "bf16"
    half_seq = max(1, base["seq_len"] // 2)
    variants = [
        ("baseline", {}),
        ("optimizer", {"optimizer": other_opt}),
        ("lora_rank", {"lora_rank": max(1, base["lora_rank"] // 2)}),
        ("shorter_seq", {"seq_len": half_seq}),
        ("shorter_seq_larger_batch", {"seq_len": half_seq, "per_device_batch": base["per_device_batch"] * 2}),
        (other_dtype, {"dtype": other_dtype}),
    ]
    return [(name, {**base, **change, "diagnostic": name}) for name, change in variants]


def build_matrix(
    opts: SessionOptions, hw: Hardware, sizes: list[int], launched: bool = False
) -> list[MatrixEntry]:
    """Every (world size, strategy, sequence length) of one benchmark test, in that order, each
    expanded into the LoRA fine-tuning guide's diagnostic variants with --llmbench-diagnostic.

    `launched`: the world sizes are started by the launcher here, so sizes beyond this machine's
    devices are skipped (under torchrun the job's ranks may span nodes)."""
    tier = resolve_tier(opts, hw)
    model = opts.model or default_model(opts.workload, hw.device) or tiers()[tier].gpu_model
    preset = resolve_model(model, opts.model_config)
    mismatch = workload_model_mismatch(opts.workload, preset.name, preset.architecture)
    if mismatch:
        # `pytest benchmarks/ --llmbench-model=llama-1b`: the decoder benchmarks run it, this one
        # skips with the reason
        return [MatrixEntry(f"{opts.workload}-{preset.name}", None, mismatch, wrong_model=True)]
    seq_lens = _checked_inputs(opts, preset)
    check_technique_options(opts, hw)
    common = _common_fields(opts, hw, model, tier, params_of(preset))
    entries = []
    # world size first: consecutive configurations share a world size, so the launcher's warm ranks
    # serve them one after another instead of being restarted at every change of world size
    for size in sizes:
        for name in opts.strategies:
            entries += _strategy_entries(opts, hw, [size], launched, name, preset, seq_lens, common)
    return entries


def _checked_inputs(opts: SessionOptions, preset: ModelPreset) -> tuple[int, ...]:
    """Refuse what cannot run before anything does; the sequence lengths to run."""
    if preset.architecture == "encdec":
        check_encdec_config(preset.name, preset.config)
    if opts.workload == "seq2seq" and opts.data_dir is not None:
        check_data_dir(opts.data_dir)
    seq_lens = opts.seq_lens or (preset.seq_len,)
    limit = preset.max_seq_len
    for seq in seq_lens:
        if limit is not None and seq > limit:
            raise SpecError(
                f"sequence length {seq} is longer than {preset.name} allows ({limit} positions): "
                f"pass --llmbench-seq-lens={min(limit, preset.seq_len)} "
                "or pick a model with a longer context."
            )
    if opts.nvme_path is not None and not os.path.isdir(opts.nvme_path):
        raise SpecError(
            f"--llmbench-nvme-path {opts.nvme_path!r} is not a directory: create it "
            f"(mkdir -p {opts.nvme_path}) or point it at a directory on an NVMe drive."
        )
    return seq_lens


def _common_fields(
    opts: SessionOptions, hw: Hardware, model: str, tier: str, params: int | None
) -> dict[str, Any]:
    """The RunSpec fields every configuration of this benchmark shares (`params`: the model's
    parameter count, for the default learning rate)."""
    cuda = hw.device == "cuda"
    dtype = (
        opts.dtype if opts.dtype != "auto" else ("bf16" if cuda and hw.bf16 else "fp16" if cuda else "fp32")
    )
    if opts.dtype == "auto" and cuda and opts.workload == "seq2seq":
        dtype = "fp16"  # the encoder-decoder benchmark runs under fp16 autocast by default
    return {
        "model": model,
        "grad_accum": opts.grad_accum,
        **_measurement_fields(opts, cuda),
        "dtype": dtype,
        "grad_ckpt": opts.grad_ckpt,
        "memory_limit_gb": opts.vram_limit_gb,
        "run_unfit": opts.run_unfit,
        "tier": tier,
        "lr": opts.lr if opts.lr is not None else default_lr(opts.workload, params),
        "lr_warmup": opts.lr_warmup if opts.lr_warmup is not None else default_lr_warmup(opts.workload),
        "seed": opts.seed,
        "device": hw.device,
        "compile": opts.compile,
        "trace": opts.profile,
        "workload": opts.workload,
        "model_config": opts.model_config,
        "optimizer": opts.optimizer,
        "lora_rank": opts.lora_rank,
        "data_dir": opts.data_dir,
        "data_workers": opts.data_workers,
        "dataset_samples": opts.dataset_samples,
        "epochs": opts.epochs,
        "warmup_epochs": opts.warmup_epochs,
        "shard_mb": opts.shard_mb,
    }


def _strategy_entries(
    opts: SessionOptions,
    hw: Hardware,
    sizes: list[int],
    launched: bool,
    name: str,
    preset: ModelPreset,
    seq_lens: tuple[int, ...],
    common: dict[str, Any],
) -> list[MatrixEntry]:
    """One strategy's configurations: each world size, sequence length, data source and
    combination of the technique axes (technique_axes.py)."""
    info, offload = parse_strategy(name)
    # other workloads make their batches in memory: for them the option selects, so a
    # session of disk runs only (--llmbench-data=disk) skips them with the reason
    sources = opts.data if opts.workload == "seq2seq" else ("memory",)
    off_source = None
    if opts.workload != "seq2seq" and "memory" not in opts.data:
        off_source = (
            f"the {opts.workload} workload trains from memory; --llmbench-data={','.join(opts.data)} "
            "selects the encoder-decoder's disk runs"
        )
    entries = []
    combos = technique_combos(opts, info)
    for world_size, seq, source, (suffix, techniques) in (
        (w, q, d, c) for w in sizes for q in seq_lens for d in sources for c in combos
    ):
        test_id = f"{name}-ws{world_size}-seq{seq}-{preset.name}"
        if opts.workload == "seq2seq":
            test_id += f"-{source}"
        test_id += suffix
        skip = (
            (_too_big(world_size, hw) if launched else None)
            or off_source
            or (
                _at_one_size(
                    opts,
                    world_size,
                    f"the {source} data source",
                    f"what reading from {source} costs a step is measured",
                )
                if source != sources[0]
                else None
            )
            or technique_skip(techniques, info, opts.workload, preset, hw)
        )
        if skip:
            entries.append(MatrixEntry(test_id, None, skip))
            continue
        if offload == "nvme" and not opts.nvme_path:
            reason = f"{name} needs a directory on NVMe: pass --llmbench-nvme-path=DIR"
            entries.append(MatrixEntry(test_id, None, reason))
            continue
        base = {
            **common,
            "warmup": warmup_for(opts, hw.device == "cuda", info.zero_stage),
            "profile_steps": profile_steps_for(opts, hw.device == "cuda", world_size, offload),
            "strategy": info.name,
            "offload": offload,
            "seq_len": seq,
            "per_device_batch": opts.batch or preset.batch,
            "world_size": world_size,
            "data": source,
            "nvme_path": opts.nvme_path if offload == "nvme" else None,
            **techniques,
        }
        entries += _variant_entries(opts, hw, test_id, base, offload)
    return entries


def at_every_size(opts: SessionOptions) -> bool:
    """Whether the questions of one GPU (the LoRA diagnostic matrix, the encoder-decoder's second data
    source) run at every world size: --llmbench-every-size, or world sizes the user named. By default
    they run at world size 1 only: which LoRA variant fits and what it costs, and what reading from
    disk costs a step, are answered there; at every size they made the default suite's planned 11.0
    minutes on 4x H200 13.8 (tools/suite_plan.py --only-at-one, on
    docs/results/2026-11-27-h200x4-suite-side-by-side)."""
    return opts.every_size or opts.world_sizes is not None


def _at_one_size(opts: SessionOptions, world_size: int, what: str, answered: str) -> str | None:
    """Why a question of one GPU (`what`, answered at world size 1: `answered`) does not run at this
    world size, or None where it does."""
    if world_size == 1 or at_every_size(opts):
        return None
    return (
        f"{what} runs at world size 1 by default, where {answered}; --llmbench-every-size, or naming the "
        f"sizes with --llmbench-world-sizes, runs it at world size {world_size} too"
    )


def _variant_entries(
    opts: SessionOptions, hw: Hardware, test_id: str, base: dict[str, Any], offload: str
) -> list[MatrixEntry]:
    """The configuration itself, or the LoRA fine-tuning guide's diagnostic variants of it."""
    named = opts.strategies != DEFAULT_STRATEGIES
    entries = []
    variants = diagnostic_variants(base) if opts.diagnostic else [("", base)]
    held = (
        _at_one_size(
            opts,
            base["world_size"],
            "the LoRA diagnostic matrix",
            "which variant fits and what it costs are answered",
        )
        if opts.diagnostic
        else None
    )
    for variant, kwargs in variants:
        variant_id = f"{test_id}-{variant}" if variant else test_id
        if held:
            entries.append(MatrixEntry(variant_id, None, held))
            continue
        if variant == "lora_rank" and kwargs["workload"] != "lora":
            entries.append(MatrixEntry(variant_id, None, f"no LoRA rank in the {opts.workload} workload"))
            continue
        unavailable = optimizer_unavailable(kwargs["optimizer"], offload, hw)
        if unavailable:
            entries.append(MatrixEntry(variant_id, None, unavailable))
            continue
        try:
            spec = RunSpec(**kwargs)
        except SpecError as exc:
            if named and not variant:
                raise  # the user named this strategy: refuse the combination
            entries.append(MatrixEntry(variant_id, None, str(exc)))  # skip it, with the reason
            continue
        # outside the try: a dataset too small for one step is the user's to fix
        entries.append(MatrixEntry(variant_id, with_epoch_steps(spec)))
    return entries
