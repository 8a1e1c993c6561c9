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


@dataclass(frozen=True)
class MatrixEntry:
    id: str
    spec: RunSpec | None
    skip: str | None = None


def resolve_tier(opts: SessionOptions, hw: Hardware) -> str:
    if opts.tier != "auto":
        return opts.tier
    return tier_for_memory(hw.device_gib if hw.device == "cuda" else None).name


def build_matrix(opts: SessionOptions, hw: Hardware, world_size: int) -> list[MatrixEntry]:
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
        for seq in seq_lens:
            test_id = f"{name}-ws{world_size}-seq{seq}-{preset.name}"
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
                )
            except SpecError as exc:
                if opts.strategies != DEFAULT_STRATEGIES:
                    raise  # the user named this strategy: refuse the combination
                entries.append(MatrixEntry(test_id, None, str(exc)))  # the default matrix: skip it
                continue
            entries.append(MatrixEntry(test_id, spec))
    return entries
