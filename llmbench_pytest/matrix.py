"""From options, marker and hardware to the list of runs a benchmark test is parametrised with.

Standard library only. Every refusal happens here, before anything trains: an unknown preset,
a sequence longer than the model allows, a missing NVMe directory. A strategy the session
cannot run for a reason outside the user's command (no NVMe directory given) becomes a skipped
test with that reason instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .hardware import Hardware
from .options import SessionOptions
from .presets import default_cpu_model, resolve_model, tier_for_memory, tiers
from .spec import DEFAULT_STRATEGIES, RunSpec, SpecError, parse_strategy

CPU_STEPS, CPU_WARMUP = 10, 2
GPU_STEPS, GPU_WARMUP = 30, 5
PROFILED_STEPS = 2
"""Untimed steps under the profiler after the window: always on GPU, on CPU with --llmbench-profile."""


@dataclass(frozen=True)
class MatrixEntry:
    id: str
    spec: RunSpec | None
    skip: str | None = None


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
    return f"world size {world_size} needs {world_size} {what} (one per rank); this machine has {hw.devices}"


def build_matrix(
    opts: SessionOptions, hw: Hardware, sizes: list[int], launched: bool = False
) -> list[MatrixEntry]:
    """Every (strategy, world size, sequence length) of one benchmark test, in that order.

    `launched`: the world sizes are started by the launcher here, so sizes beyond this machine's
    devices are skipped (under torchrun the job's ranks may span nodes)."""
    tier = resolve_tier(opts, hw)
    model = opts.model or (tiers()[tier].gpu_model if hw.device == "cuda" else default_cpu_model())
    preset = resolve_model(model)
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
    cuda = hw.device == "cuda"
    dtype = (
        opts.dtype if opts.dtype != "auto" else ("bf16" if cuda and hw.bf16 else "fp16" if cuda else "fp32")
    )
    steps = opts.steps or (GPU_STEPS if cuda else CPU_STEPS)
    warmup = opts.warmup if opts.warmup is not None else (GPU_WARMUP if cuda else CPU_WARMUP)

    entries = []
    for name in opts.strategies:
        info, offload = parse_strategy(name)
        for world_size, seq in ((w, q) for w in sizes for q in seq_lens):
            test_id = f"{name}-ws{world_size}-seq{seq}-{preset.name}"
            too_big = _too_big(world_size, hw) if launched else None
            if too_big:
                entries.append(MatrixEntry(test_id, None, too_big))
                continue
            if offload == "nvme" and not opts.nvme_path:
                entries.append(
                    MatrixEntry(
                        test_id, None, f"{name} needs a directory on NVMe: pass --llmbench-nvme-path=DIR"
                    )
                )
                continue
            try:
                spec = RunSpec(
                    strategy=info.name,
                    offload=offload,
                    model=model,
                    seq_len=seq,
                    per_device_batch=opts.batch or preset.batch,
                    grad_accum=opts.grad_accum,
                    steps=steps,
                    warmup=warmup,
                    dtype=dtype,  # type: ignore[arg-type]
                    world_size=world_size,
                    grad_ckpt=opts.grad_ckpt,
                    tier=tier,
                    nvme_path=opts.nvme_path if offload == "nvme" else None,
                    lr=opts.lr,
                    seed=opts.seed,
                    device=hw.device,  # type: ignore[arg-type]
                    compile=opts.compile,
                    profile_steps=PROFILED_STEPS if (cuda or opts.profile) else 0,
                    trace=opts.profile,
                )
            except SpecError as exc:
                if opts.strategies != DEFAULT_STRATEGIES:
                    raise  # the user named this strategy: refuse the combination
                entries.append(MatrixEntry(test_id, None, str(exc)))  # the default matrix: skip it
                continue
            entries.append(MatrixEntry(test_id, spec))
    return entries
