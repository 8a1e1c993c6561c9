"""Harness overhead: llmbench's reported tokens/s over a bare training loop's, same everything.

    python tools/measure_overhead.py                       # one process (CPU: llama-tiny)
    torchrun --nproc_per_node=2 tools/measure_overhead.py  # two ranks
    python tools/measure_overhead.py --strategy zero2 --model llama-1b --seq-len 2048 --batch 8 --dtype bf16
    python tools/measure_overhead.py --strategy fsdp_grad_op --model llama-1b --batch 16 --compile \
        --fused-loss chunked --fp8 tensorwise          # a technique axis: both loops apply it

The bare loop below is written from scratch with plain torch (and plain deepspeed for zero*):
build the model, wrap it, AdamW, then time `steps` steps with one clock read at each end of the
window (synchronized on GPU). It trains the same preset, batch, sequence length, precision and
micro-batches as llmbench, in the same process group. With --compile, --fused-loss, --fp8 or
--attention, the bare loop applies the same technique by calling the library itself (torchao's
convert_to_float8_training, Liger's instance patch, llmbench's chunked loss as its loss function,
block.compile(), an sdpa_kernel context around its steps), so the ratio is the harness's cost for
that technique, not the technique's. The two alternate (bare, llmbench,
llmbench, bare, ...) so drift on the machine hits both; both the ratio of the medians and
the median of the back-to-back pair ratios are printed. A ratio of
1.0 means the harness costs nothing; below 1.0, llmbench reports less throughput than the
loop achieves.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist

from llmbench_pytest.config.presets import resolve_model
from llmbench_pytest.config.ranks import rank_env
from llmbench_pytest.config.spec import ATTENTION_BACKENDS, FP8_RECIPES, FUSED_LOSSES, RunSpec
from llmbench_pytest.worker import dist as lb_dist
from llmbench_pytest.worker.data import rank_batches
from llmbench_pytest.worker.models import build_model
from llmbench_pytest.worker.run import run_benchmark
from llmbench_pytest.worker.strategies.deepspeed_zero import build_config


def bare_techniques(model: torch.nn.Module, blocks: tuple, spec: RunSpec, device: torch.device):
    """The run's techniques applied by hand, in torchao's order (fp8, loss, compile; the strategy
    wraps after). Returns the context the steps run in and what follows each optimizer step."""
    stack = contextlib.ExitStack()
    if spec.fp8 != "none":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        all_gather = spec.strategy.startswith("fsdp") and spec.fp8 == "tensorwise"
        config = dataclasses.replace(
            Float8LinearConfig.from_recipe_name(spec.fp8),
            enable_fsdp_float8_all_gather=all_gather,
            emulate=device.type != "cuda",
        )
        convert_to_float8_training(
            model,
            module_filter_fn=lambda m, fqn: (
                "lm_head" not in fqn and m.in_features % 16 == 0 and m.out_features % 16 == 0
            ),
            config=config,
        )
        if spec.fp8 == "rowwise":
            stack.enter_context(_flag(torch._inductor.config, "emulate_precision_casts", True))
    if spec.fused_loss == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(model=model, rope=False, rms_norm=False, swiglu=False)
    elif spec.fused_loss == "chunked":
        from llmbench_pytest.worker.chunked_loss import patch_causal_lm  # the technique itself

        patch_causal_lm(model, compiled=spec.compile)
    if spec.attention == "fa2":
        model.set_attn_implementation("flash_attention_2")
    elif spec.attention != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        names = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
        stack.enter_context(sdpa_kernel(getattr(SDPBackend, names.get(spec.attention, "MATH"))))
        if spec.compile:  # the cache key ignores the SDPA backend (pytorch#185449)
            stack.enter_context(_flag(torch._inductor.config, "fx_graph_cache", False))
            stack.enter_context(_flag(torch._functorch.config, "enable_autograd_cache", False))
    if spec.compile:
        for m in model.modules():
            if isinstance(m, blocks):
                m.compile()

    def after_step(wrapped: torch.nn.Module) -> None:
        if spec.fp8 == "tensorwise" and spec.strategy.startswith("fsdp"):
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(wrapped)

    return stack, after_step


@contextlib.contextmanager
def _flag(config, name: str, value):
    before = getattr(config, name)
    setattr(config, name, value)
    try:
        yield
    finally:
        setattr(config, name, before)


def bare_loop(spec: RunSpec, device: torch.device) -> float:
    """Tokens/s of a plain loop; the strategy is wired by hand, not through llmbench's modules."""
    plain = spec.replace(fused_loss="none", fp8="none", attention="default")  # applied below, by hand
    built = build_model(plain, resolve_model(spec.model, spec.model_config), device)
    model = built.module
    context, after_step = bare_techniques(model, built.block_classes, spec, device)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.dtype)
    fused = {"fused": True} if device.type == "cuda" else {"foreach": True}
    engine = None
    if spec.strategy == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
        opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.0, **fused)
    elif spec.strategy.startswith("fsdp"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (
            MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=torch.float32)
            if amp
            else MixedPrecisionPolicy()
        )
        keep = spec.strategy == "fsdp"
        for m in model.modules():
            if isinstance(m, built.block_classes):
                fully_shard(m, reshard_after_forward=keep, mp_policy=mp)
        fully_shard(model, reshard_after_forward=keep, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.0, **fused)
        amp = None  # FSDP casts itself
    else:
        import deepspeed

        engine, opt, _, _ = deepspeed.initialize(
            model=model,
            model_parameters=model.parameters(),
            config=build_config(spec, built.hidden_size, device),
            dist_init_required=False,
        )
    rank, world = dist.get_rank(), dist.get_world_size()
    total = (spec.warmup + spec.steps) * spec.grad_accum
    batches = rank_batches(
        spec.seed,
        rank,
        world,
        total,
        spec.per_device_batch,
        spec.seq_len,
        built.vocab_size,
        pin=device.type == "cuda",
    )

    def step(i: int) -> None:
        for a in range(spec.grad_accum):
            x = batches[i * spec.grad_accum + a].to(device, non_blocking=True)
            if engine is not None:
                loss = engine(input_ids=x, labels=x, use_cache=False).loss
                engine.backward(loss)
                engine.step()
                continue
            with (
                torch.autocast(device.type, dtype=amp) if amp else torch.autocast(device.type, enabled=False)
            ):
                loss = model(input_ids=x, labels=x, use_cache=False).loss
            (loss / spec.grad_accum).backward()
        if engine is None:
            opt.step()
            after_step(model)
            opt.zero_grad(set_to_none=True)

    with context:
        for i in range(spec.warmup):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for i in range(spec.warmup, spec.warmup + spec.steps):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = torch.tensor(time.perf_counter() - start, dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if engine is not None:
        engine.destroy()
    if spec.compile:
        torch._dynamo.reset()  # as llmbench's close() does: each run compiles afresh
    return spec.tokens_per_step * spec.steps / elapsed.item()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strategy", default="ddp", help="ddp, fsdp, fsdp_grad_op or zero0..zero3")
    parser.add_argument("--model", default=None, help="preset (default: llama-tiny on CPU, llama-1b on GPU)")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--dtype", default=None, help="bf16, fp16, fp32 (default: bf16 on GPU, fp32 on CPU)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="torch.compile each block (both loops)")
    parser.add_argument("--fused-loss", default="none", choices=FUSED_LOSSES, help="(both loops)")
    parser.add_argument(
        "--fp8", default="none", choices=FP8_RECIPES, help="needs --compile on a GPU (both loops)"
    )
    parser.add_argument("--attention", default="default", choices=ATTENTION_BACKENDS, help="(both loops)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of (bare, llmbench) runs")
    parser.add_argument("--json", default=None, help="write the figures to this file (rank 0)")
    args = parser.parse_args()

    env = rank_env()
    cuda = torch.cuda.is_available()
    ctx = lb_dist.init(env, "cuda" if cuda else "cpu", timeout_s=600)
    preset = resolve_model(args.model or ("llama-1b" if cuda else "llama-tiny"))
    spec = RunSpec(
        strategy=args.strategy,
        model=preset.name,
        seq_len=args.seq_len or preset.seq_len,
        per_device_batch=args.batch or preset.batch,
        steps=args.steps,
        warmup=args.warmup,
        dtype=args.dtype or ("bf16" if cuda else "fp32"),
        world_size=env.world_size,
        device="cuda" if cuda else "cpu",
        compile=args.compile,
        fused_loss=args.fused_loss,
        fp8=args.fp8,
        attention=args.attention,
    )
    quiet = logging.getLogger("llmbench.overhead")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    bare, harness = [], []
    for r in range(args.repeats):
        order = ("bare", "llmbench") if r % 2 == 0 else ("llmbench", "bare")
        for which in order:
            if which == "bare":
                bare.append(bare_loop(spec, ctx.device))
            else:
                m = run_benchmark(spec, ctx, quiet)
                assert m.ok, m.error
                harness.append(spec.tokens_per_step / statistics.fmean(m.step_times))
            if ctx.device.type == "cuda":
                torch.cuda.empty_cache()
    if env.rank == 0:
        figures = {
            "spec": spec.to_dict(),
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "cpu_threads_per_rank": torch.get_num_threads(),
            "bare_tokens_per_sec": bare,
            "llmbench_tokens_per_sec": harness,
            "ratio_of_medians": statistics.median(harness) / statistics.median(bare),
            # each pair ran back to back, so its ratio is free of the machine's slower drift
            "median_pair_ratio": statistics.median(h / b for h, b in zip(harness, bare, strict=True)),
        }
        print(json.dumps(figures, indent=2))
        techniques = " compile" if spec.compile else ""
        techniques += f" loss={spec.fused_loss} fp8={spec.fp8} attn={spec.attention}"
        print(
            f"{spec.name} ws{spec.world_size} {spec.model} seq{spec.seq_len} b{spec.per_device_batch} "
            f"{spec.dtype}{techniques}: bare {statistics.median(bare):,.0f} tok/s, "
            f"llmbench {statistics.median(harness):,.0f} tok/s, "
            f"ratio of medians {figures['ratio_of_medians']:.3f}, "
            f"median pair ratio {figures['median_pair_ratio']:.3f}"
        )
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
    lb_dist.shutdown(ctx)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
