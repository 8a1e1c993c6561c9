"""Where a fresh rank's first training step goes: forward, backward and the optimizer, each timed
to the device's end, for the first steps of a new process (a session's first configuration spent
2.2-2.9 s on its first warm-up step on 1x H100, a warm rank 0.4 s).

    python3 tools/gpu/first_step.py                       # ddp, llama-1b, seq 2048, batch 8
    python3 tools/gpu/first_step.py --strategy fsdp --steps 3 --json out.json
    python3 tools/gpu/first_step.py --collective-first    # one all-reduce before the first step
    python3 tools/gpu/first_step.py --attention-first     # the model's attention alone, before step 1
    python3 tools/gpu/first_step.py --attention flash     # as --llmbench-attention=flash
    python3 tools/gpu/first_step.py --attention-ready     # as a fresh rank: beside the imports

The last two ask where a fresh host's first step loses about 1 s to the driver's JIT
(docs/results/2026-11-26-h100-pretrain-fresh-host-4, calls 7-10): if it is cuDNN's runtime-compiled
attention, `--attention-first` moves that second into `attention_first` and `--attention flash`
removes it (compare `du -sk ~/.nv/ComputeCache` after each, in a new CUDA_CACHE_PATH).

Runs one rank in this process the way a launcher's rank does (torchrun's environment, NCCL with its
eager connect, llmbench's own model, strategy and batches), prints each phase's seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from contextlib import nullcontext

from llmbench_pytest.config.spec import ATTENTION_BACKENDS  # no torch: the imports stay timed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--model", default="llama-1b")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--collective-first", action="store_true", help="an all-reduce before step 1")
    parser.add_argument(
        "--attention-first", action="store_true",
        help="scaled_dot_product_attention forward and backward at the model's shape before step 1",
    )  # fmt: skip
    parser.add_argument(
        "--attention-ready", action="store_true",
        help="the same, in a thread beside the imports, as a fresh rank does (worker/attention_warmup.py)",
    )  # fmt: skip
    parser.add_argument(
        "--attention", choices=ATTENTION_BACKENDS, default="default",
        help="the run's attention, as --llmbench-attention sets it (an SDPA backend holds for the first too)",
    )  # fmt: skip
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torchrun_env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29533",
        "TORCHELASTIC_RUN_ID": "probe",
    }
    for key, value in torchrun_env.items():
        os.environ.setdefault(key, value)
    marks: dict[str, float] = {}
    began = time.perf_counter()

    def mark(name: str) -> None:
        marks[name] = round(time.perf_counter() - began, 3)

    import torch

    from llmbench_pytest.config.presets import resolve_model
    from llmbench_pytest.config.ranks import rank_env
    from llmbench_pytest.config.spec import RunSpec, parse_strategy
    from llmbench_pytest.worker import dist
    from llmbench_pytest.worker.attention_warmup import attention_ready
    from llmbench_pytest.worker.data import rank_batches
    from llmbench_pytest.worker.models import build_model, preload
    from llmbench_pytest.worker.strategies import make_strategy

    mark("import_torch_and_worker")
    info, offload = parse_strategy(args.strategy)
    spec = RunSpec(
        strategy=info.name, offload=offload, model=args.model, seq_len=args.seq_len,
        per_device_batch=args.batch, steps=args.steps, warmup=0, dtype="bf16", device="cuda",
        attention=args.attention,
    )  # fmt: skip
    ctx = dist.init(rank_env(), "cuda", 600.0)
    mark("dist_init")
    preset = resolve_model(spec.model, spec.model_config)
    warmup: dict[str, float] = {}
    with (
        attention_ready(spec, preset, ctx.device, warmup, logging.getLogger("first_step"))
        if args.attention_ready
        else nullcontext()
    ):
        preload(spec, preset)
    mark("preload")
    marks.update({k: round(v, 3) for k, v in warmup.items()})
    built = build_model(spec, preset, ctx.device)
    torch.cuda.synchronize()
    mark("build")
    strategy = make_strategy(spec)
    strategy.setup(built, spec, ctx)
    torch.cuda.synchronize()
    mark("wrap")
    batches = rank_batches(
        spec.seed, 0, 1, args.steps, spec.per_device_batch, spec.seq_len, built.vocab_size, pin=True
    )
    mark("data")
    if args.attention_first:
        _attention(preset.config, spec.per_device_batch, spec.seq_len, ctx.device)
        mark("attention_first")
    if args.collective_first:
        t = torch.ones(1, device=ctx.device)
        torch.distributed.all_reduce(t)
        torch.cuda.synchronize()
        mark("first_collective")
    for i, host in enumerate(batches, start=1):
        ids = host.to(ctx.device, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = strategy.micro_step(ids, True)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        strategy.optimizer_step()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        marks[f"step{i}_forward_backward"] = round(t1 - t0, 3)
        marks[f"step{i}_optimizer"] = round(t2 - t1, 3)
        float(loss)
    mark("end")
    loading = os.environ.get("CUDA_MODULE_LOADING", "default")
    record = {
        "strategy": args.strategy, "collective_first": args.collective_first,
        "attention_first": args.attention_first, "attention_ready": args.attention_ready,
        "attention": args.attention,
        "module_loading": loading, "marks": marks,
    }  # fmt: skip
    print(json.dumps(record))
    if args.json:
        with open(args.json, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    strategy.close()
    dist.shutdown(ctx)
    return 0


def _attention(config: dict, batch: int, seq_len: int, device) -> None:
    """One causal attention forward and backward in bf16 at the model's heads and head size, as
    the model's first step will call it (Llama's SDPA path: batch, heads, sequence, head size)."""
    import torch
    import torch.nn.functional as F

    heads = config["num_attention_heads"]
    shape = (batch, heads, seq_len, config["hidden_size"] // heads)
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    torch.cuda.synchronize()
    del q, k, v
    torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
