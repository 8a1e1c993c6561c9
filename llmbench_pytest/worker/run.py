"""Runs inside each rank: one benchmark run from RunSpec to Measurement.

Build the model, wrap it with the strategy, make the data, run the timed loop, then combine
every rank's samples (the slowest rank's step times, the mean loss, each rank's memory) over
the control group. A failure inside the run (out of memory, any exception) becomes the run's
status instead of escaping: the traceback is cut loose so nothing keeps the model alive, and
the session moves on with the memory released.
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any

import torch

from ..config.presets import resolve_model
from ..results.measurement import Measurement
from . import env_info
from .data import rank_batches
from .dist import DistContext, all_gather_object, max_over_ranks, mean_over_ranks
from .epoch_loop import epoch_loop
from .loop import LoopSamples, extra_steps, timed_loop
from .memory import release
from .models import build_model
from .probes import h2d_link_gbps
from .seq2seq_data import make_epoch_data
from .strategies import make_strategy
from .techniques import TechniqueUnavailable

if TYPE_CHECKING:
    import logging
    from pathlib import Path

    from ..config.spec import RunSpec


def classify(exc: BaseException) -> str:
    if isinstance(exc, TechniqueUnavailable):
        return "unavailable"  # skipped with the reason, not failed
    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    text = str(exc).lower()
    # DeepSpeed and NCCL wrap allocator failures in RuntimeError
    if "out of memory" in text or "cuda_error_out_of_memory" in text:
        return "oom"
    return "error"


def _describe_error(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).strip()
    return text if len(text) < 4000 else text[:4000] + " ...[truncated]"


def run_benchmark(
    spec: RunSpec,
    ctx: DistContext,
    log: logging.Logger,
    repo_dir: str | None = None,
    trace_dir: Path | None = None,
) -> Measurement:
    preset = resolve_model(spec.model, spec.model_config)
    started = time.perf_counter()
    samples: LoopSamples | None = None
    link: float | None = None
    model_summary: dict[str, Any] = {}
    strategy_info: dict[str, Any] = {}
    setup_s: float | None = None
    status, error = "ok", None
    strategy = None
    built = None
    try:
        built = build_model(spec, preset, ctx.device)
        model_summary = built.summary
        log.info("built %s: %.1fM parameters", preset.name, built.summary["params"] / 1e6)
        strategy = make_strategy(spec)
        strategy.setup(built, spec, ctx)
        strategy_info = strategy.describe()
        epoch_data = None
        if spec.workload == "seq2seq":
            epoch_data = make_epoch_data(spec, built.vocab_size, ctx, log)
        else:
            count = (spec.warmup + spec.steps + extra_steps(spec)) * spec.grad_accum
            batches = rank_batches(
                spec.seed,
                ctx.rank,
                ctx.world_size,
                count,
                spec.per_device_batch,
                spec.seq_len,
                built.vocab_size,
                pin=ctx.device.type == "cuda",
            )
        link = h2d_link_gbps(ctx.device)
        setup_s = time.perf_counter() - started
        log.info("%s ready in %.1f s", spec.name, setup_s)
        # *.pt.trace.json is the name TensorBoard's profiler plugin looks for
        trace_path = trace_dir / f"rank{ctx.rank}.pt.trace.json" if trace_dir is not None else None
        if epoch_data is not None:
            samples = epoch_loop(strategy, epoch_data, spec, ctx.device, log, ctx.rank, trace_path)
        else:
            samples = timed_loop(strategy, batches, spec, ctx.device, log, ctx.rank, trace_path)
    except Exception as exc:
        status = classify(exc)
        error = f"rank {ctx.rank}: {exc if status == 'unavailable' else _describe_error(exc)}"
        log.error("%s failed (%s): %s", spec.name, status, error)
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)  # frames would keep the model alive
        del exc
    finally:
        if strategy is not None:
            try:
                strategy.close()
            except Exception as close_exc:  # a failed run may leave the engine half-built
                log.warning("closing %s failed: %s", spec.name, close_exc)
        strategy = built = None
        release(ctx.device)
    extras = {"h2d_link_gbps": link}
    return combine(spec, ctx, status, error, samples, model_summary, strategy_info, setup_s, repo_dir, extras)


def combine(
    spec: RunSpec,
    ctx: DistContext,
    status: str,
    error: str | None,
    samples: LoopSamples | None,
    model_summary: dict[str, Any],
    strategy_info: dict[str, Any],
    setup_s: float | None,
    repo_dir: str | None,
    rank_extras: dict[str, Any] | None = None,
) -> Measurement:
    """Gather every rank's outcome and samples; the result is identical on all ranks."""
    mine: dict[str, Any] = {"rank": ctx.rank, "status": status, "error": error, **(rank_extras or {})}
    if samples is not None:
        mine.update(
            mean_step_time_sec=sum(samples.step_times) / len(samples.step_times),
            # model states on the training device; on a GPU, what offload keeps in host memory apart
            census_bytes=samples.census.get(ctx.device.type, 0),
            census_host_bytes=samples.census.get("cpu", 0) if ctx.device.type == "cuda" else None,
            h2d_bytes=samples.h2d_bytes,
            window_s=samples.window_s,
            gpu_monitor=samples.gpu_monitor,
            gpu_monitor_error=samples.gpu_monitor_error,
            trace=samples.trace,
            epochs=samples.epochs,
            data_source=samples.data,
            **samples.memory,
        )
    ranks: list[dict[str, Any]] = all_gather_object(ctx, mine)  # type: ignore[assignment]
    failed = [r for r in ranks if r["status"] != "ok"]
    env = env_info.collect(ctx.device, repo_dir)
    if failed:
        # one rank's out-of-memory is the run's out-of-memory, whatever the others saw after it
        worst = next((r for r in failed if r["status"] == "oom"), failed[0])
        return Measurement(
            status=worst["status"],
            error=worst["error"],
            failed_ranks=[r["rank"] for r in failed],
            per_rank=ranks,
            model=model_summary,
            strategy=strategy_info,
            setup_s=setup_s,
            env=env,
        )
    assert samples is not None
    return Measurement(
        status="ok",
        step_times=max_over_ranks(ctx, samples.step_times),
        losses=mean_over_ranks(ctx, samples.losses),
        warmup_losses=mean_over_ranks(ctx, samples.warmup_losses),
        window_s=max(r["window_s"] for r in ranks),
        timing_method=samples.timing_method,
        per_rank=ranks,
        model=model_summary,
        strategy=strategy_info,
        setup_s=setup_s,
        env=env,
    )
