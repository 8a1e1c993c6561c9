"""Runs inside each rank: one benchmark run from RunSpec to Measurement.

Build the model, wrap it with the strategy, make the data, run the timed loop, then combine
every rank's samples (the slowest rank's step times, the mean loss, each rank's memory) over
the control group. A failure inside the run (out of memory, any exception) becomes the run's
status instead of escaping: the traceback is cut loose so nothing keeps the model alive, and
the session moves on with the memory released.

The same process may serve many configurations (launcher's warm ranks, in-rank and in-process
sessions), so each run leaves it as it found it: the strategy closed, the model, data and compiled
graphs dropped, allocator caches emptied and peak statistics reset (memory.release). Where the
setup went is recorded per phase (build, wrap, data, probe); a DeepSpeed op compiled on first use
is timed apart (ops.py), since it is paid once per machine, not per run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import traceback
from typing import TYPE_CHECKING, Any

import torch

from ..analysis.peak_model import UNFIT
from ..config.presets import resolve_model
from ..results.measurement import Measurement
from . import env_info, link_probe, process_settings
from .attention_warmup import attention_ready
from .data import rank_batches
from .dist import (
    DistContext,
    all_gather_object,
    flush_device_collectives,
    max_over_ranks,
    mean_over_ranks,
    renew_steps_group,
)
from .epoch_loop import epoch_loop
from .faults import teardown_fault
from .live_objects import settle
from .loop import LoopSamples, extra_steps, timed_loop
from .memory import (
    LEFTOVER_LIMIT_BYTES,
    FreshLevel,
    beyond_limit,
    fresh_level,
    has_fresh_level,
    leftover,
    release,
)
from .models import build_model, preload
from .ops import prepare_ops
from .probes import h2d_link_gbps
from .progress import note, start_clock
from .seq2seq_data import make_epoch_data
from .strategies import make_strategy
from .techniques import TechniqueUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from ..analysis.peak_model import PeakPrediction
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


@contextlib.contextmanager
def _timed(phases: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = time.perf_counter() - started


def run_benchmark(
    spec: RunSpec,
    ctx: DistContext,
    log: logging.Logger,
    repo_dir: str | None = None,
    trace_dir: Path | None = None,
    on_failure: Callable[[str, str], None] | None = None,
) -> Measurement:
    """`on_failure(status, error)` is called as soon as this rank's run has failed, before its
    teardown: the launcher hears of it while the peers may still wait in a collective."""
    start_clock()
    note(log, logging.INFO, {"phase": "building"}, "building %s for %s", spec.model, spec.name)
    phases: dict[str, float] = {}
    ops: dict[str, Any] = {}
    held: dict[str, Any] = {}  # model, strategy, data: dropped in one place before memory is released
    samples: LoopSamples | None = None
    status, error = "ok", None
    if not has_fresh_level(ctx.device):
        with _timed(phases, "import_sec"), contextlib.suppress(Exception):
            # what fails to import or resolve here fails the build below, as the run's status
            preset = resolve_model(spec.model, spec.model_config)
            with attention_ready(spec, preset, ctx.device, phases, log):  # beside the imports
                preload(spec, preset)
        with _timed(phases, "link_probe_sec"):
            link_probe.measure_once(ctx, log)  # the group's first run, before the fresh level
    fresh = fresh_level(ctx.device)  # before this process's first run: what every run returns to
    process_settings.fresh()  # and torch's process-wide switches as they were then
    try:
        samples = _train(spec, ctx, log, trace_dir, phases, ops, held)
    except Exception as exc:
        status = classify(exc)
        error = f"rank {ctx.rank}: {exc if status == 'unavailable' else _describe_error(exc)}"
        log.error("%s failed (%s): %s", spec.name, status, error)
        if on_failure is not None:
            on_failure(status, error)
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)  # frames would keep the model alive
        del exc
    finally:
        try:
            _teardown(spec, ctx, log, held)
        except Exception as exc:
            # the figures measured stand, but this process is in no known state to run the next
            # configuration: an error status ends its warm group (main.py) and a fresh one follows
            log.error("%s: teardown failed: %s", spec.name, _describe_error(exc))
            if status == "ok":
                status, error = "error", f"rank {ctx.rank}: teardown failed: {_describe_error(exc)}"
            del exc
        try:
            # every rank, whatever its teardown did: it is a collective
            flush_device_collectives(ctx, lambda: beyond_limit(ctx.device, fresh))
        except Exception as exc:  # a communicator a failed run broke: the group ends, as above
            log.error("%s: teardown failed: %s", spec.name, _describe_error(exc))
            if status == "ok":
                status, error = "error", f"rank {ctx.rank}: teardown failed: {_describe_error(exc)}"
            del exc
    left = (
        _check_leftover(spec, ctx, log, fresh) if status != "error" or "teardown" not in str(error) else None
    )
    settle()  # what the process holds between runs: out of the next run's collections (live_objects.py)
    setup = ("build_sec", "wrap_sec", "data_sec", "probe_sec")
    setup_s = sum(phases[k] for k in setup) if all(k in phases for k in setup) else None
    timing = {"phases": phases, "ops": ops or None}
    if samples is not None:
        phases.update(warmup_sec=samples.warmup_s, after_window_sec=samples.after_s)
        timing.update(measurement=samples.plan, stopped=samples.stopped, warmup_steps=samples.warmup_step_s,
                      window_started_unix=samples.window_started_unix)  # fmt: skip
    extras = {"h2d_link_gbps": held.get("link"), "leftover": left}
    measurement = combine(
        spec, ctx, status, error, samples, held.get("summary", {}), held.get("strategy_info", {}),
        setup_s, repo_dir, extras, timing,
    )  # fmt: skip
    if not measurement.ok:
        renew_steps_group(ctx)
    note(log, logging.INFO, {"phase": "done"}, "%s: %s", spec.name, measurement.status)
    return measurement


def _train(
    spec: RunSpec,
    ctx: DistContext,
    log: logging.Logger,
    trace_dir: Path | None,
    phases: dict[str, float],
    ops: dict[str, Any],
    held: dict[str, Any],
) -> LoopSamples:
    """Build, wrap, feed and measure; what must be released later goes into `held`."""
    preset = resolve_model(spec.model, spec.model_config)
    with _timed(phases, "predict_sec"):
        predicted, record = _predict_peak(spec, preset, log, ctx.device)
    held["summary"] = {"predicted_peak": record}
    refuse_unfit(spec, ctx.device, predicted)
    with _timed(phases, "build_sec"):
        built = held["built"] = build_model(spec, preset, ctx.device)
    held["summary"] = {**built.summary, "predicted_peak": record}
    log.info("built %s: %.1fM parameters in %.2f s", preset.name, built.summary["params"] / 1e6,
             phases["build_sec"])  # fmt: skip
    if spec.info.family == "deepspeed":
        # a JIT-built op is compiled once per machine; its build is not this run's setup
        with _timed(phases, "ops_sec"):
            ops.update(prepare_ops(spec, ctx.device, log))
    with _timed(phases, "wrap_sec"):
        strategy = held["strategy"] = make_strategy(spec)
        strategy.setup(built, spec, ctx)
    held["strategy_info"] = strategy.describe()
    with _timed(phases, "data_sec"):
        if spec.workload == "seq2seq":
            feed = held["data"] = make_epoch_data(spec, built.vocab_size, ctx, log)
        else:
            count = (spec.warmup + spec.steps + extra_steps(spec)) * spec.grad_accum
            feed = held["data"] = rank_batches(
                spec.seed, ctx.rank, ctx.world_size, count, spec.per_device_batch, spec.seq_len,
                built.vocab_size, pin=ctx.device.type == "cuda",
            )  # fmt: skip
    with _timed(phases, "probe_sec"):
        held["link"] = h2d_link_gbps(ctx.device)
    log.info("%s ready in %.1f s", spec.name, sum(phases.values()) - phases.get("ops_sec", 0.0))
    # *.pt.trace.json is the name TensorBoard's profiler plugin looks for
    trace_path = trace_dir / f"rank{ctx.rank}.pt.trace.json" if trace_dir is not None else None
    if spec.workload == "seq2seq":
        return epoch_loop(strategy, feed, spec, ctx.device, log, ctx.rank, trace_path)
    return timed_loop(strategy, feed, spec, ctx, log, trace_path)


def _predict_peak(
    spec: RunSpec, preset: Any, log: logging.Logger, device: torch.device
) -> tuple[PeakPrediction | None, dict[str, Any]]:
    """The peak predicted before the model exists (plan/predict.py; traced once per model, shape and
    precision in this process), recorded beside the measured one. A configuration the trace cannot
    follow is recorded with the reason and runs as it would have."""
    from ..plan.predict import predict_spec

    major = torch.cuda.get_device_capability(device)[0] if device.type == "cuda" else None
    try:
        predicted = predict_spec(spec, preset, major)
    except Exception as exc:
        log.info("%s: no peak prediction: %s", spec.name, exc)
        return None, {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return predicted, predicted.to_dict()


def refuse_unfit(spec: RunSpec, device: torch.device, predicted: PeakPrediction | None) -> None:
    """On a GPU, skip before anything is allocated a configuration predicted to exceed the memory it
    has (--llmbench-vram-limit-gb where given, else the GPU's) by more than UNFIT_MARGIN: minutes
    of OOMs answer nothing the prediction does not. --llmbench-run-unfit runs it anyway. On a CPU
    the prediction is a GPU's and the limit is the process's RSS: nothing is skipped there."""
    if predicted is None or spec.run_unfit or device.type != "cuda":
        return
    limit, what = spec.memory_limit_gb, "--llmbench-vram-limit-gb"
    if limit is None:
        limit, what = torch.cuda.get_device_properties(device).total_memory / 1e9, "GPU's memory"
    if not predicted.clearly_unfit(limit):
        return
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in predicted.parts.items())
    raise TechniqueUnavailable(
        f"{UNFIT}: {predicted.allocated_gb:.2f} GB allocated per rank ({parts} GB) against "
        f"the {what} of {limit:.2f} GB. Shard more (zero3, fsdp, offload), lower --llmbench-batch or "
        "turn on --llmbench-grad-ckpt (llmbench plan shows each); --llmbench-run-unfit runs it anyway."
    )


def _teardown(spec: RunSpec, ctx: DistContext, log: logging.Logger, held: dict[str, Any]) -> None:
    """Leave the process as the next configuration needs it: the strategy closed (DeepSpeed's
    engine destroyed, hooks gone), model and data dropped, memory handed back (memory.release)."""
    strategy = held.pop("strategy", None)
    if strategy is not None:
        try:
            strategy.close()
        except Exception as close_exc:  # a failed run may leave the engine half-built
            log.warning("closing %s failed: %s", spec.name, close_exc)
    for key in ("built", "data"):
        held.pop(key, None)
    strategy = None
    teardown_fault(spec, ctx.rank, ctx.device)
    release(ctx.device, compiled=spec.compile)


def _check_leftover(
    spec: RunSpec, ctx: DistContext, log: logging.Logger, fresh: FreshLevel
) -> dict[str, Any]:
    """What this process still holds after the teardown, beyond what it held before its first run.
    Beyond LEFTOVER_LIMIT_BYTES the next run's memory figures would not be a fresh process's: the
    tensors are named in the log and result.json, and the warm group ends after this run."""
    left = leftover(ctx.device, fresh)
    left["limit_bytes"] = LEFTOVER_LIMIT_BYTES
    left["settings"] = process_settings.changed(process_settings.fresh())
    if left["settings"]:
        flipped = "; ".join(
            f"{c['setting']}: {c['fresh']} before the first run, {c['left']} now" for c in left["settings"]
        )
        log.warning(
            "%s left torch's process-wide settings changed (%s): a fresh rank would run the next "
            "configuration without them, so this group ends after this run", spec.name, flipped,
        )  # fmt: skip
    if left["bytes"] > LEFTOVER_LIMIT_BYTES:
        what = "of device memory" if ctx.device.type == "cuda" else "in tensors"
        named = "; ".join(left["tensors"]) or "none that Python holds"
        if left.get("allocated_at"):
            named += ". Allocated at: " + "; ".join(left["allocated_at"])
        log.warning(
            "%s left %.1f MiB %s behind after its teardown (a fresh rank holds %.1f MiB; at most %d MiB "
            "may stay): this group ends after this run. Largest tensors left: %s",
            spec.name, left["bytes"] / 2**20, what, fresh.device_bytes / 2**20,
            LEFTOVER_LIMIT_BYTES >> 20, named,
        )  # fmt: skip
    return left


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
    timing: dict[str, Any] | None = None,
) -> Measurement:
    """Gather every rank's outcome and samples; the result is identical on all ranks."""
    mine: dict[str, Any] = {
        "rank": ctx.rank,
        "pid": os.getpid(),
        "status": status,
        "error": error,
        **(rank_extras or {}),
    }
    if samples is not None:
        mine.update(
            mean_step_time_sec=sum(samples.step_times) / len(samples.step_times),
            optimizer_sec_mean=sum(samples.optimizer_times) / len(samples.optimizer_times)
            if samples.optimizer_times
            else None,
            # step by step, for the straggler finding (analysis/straggler.py)
            optimizer_host_sec_steps=samples.optimizer_host_times,
            # model states on the training device; on a GPU, what offload keeps in host memory apart
            census_bytes=samples.census.get(ctx.device.type, 0),
            census_host_bytes=samples.census.get("cpu", 0) if ctx.device.type == "cuda" else None,
            h2d_bytes=samples.h2d_bytes,
            window_s=samples.window_s,
            gpu_monitor=samples.gpu_monitor,
            gpu_monitor_error=samples.gpu_monitor_error,
            trace=samples.trace,
            gc_pauses=samples.gc_pauses,
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
            timing=timing or {},
            link=link_probe.measured(),
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
        timing=timing or {},
        link=link_probe.measured(),
    )
