"""result.json's contents: from one run's Measurement and the session's facts to the document.

Standard library only. The benchmark card's thirteen fields come first (results/schema.py); the rest
is built section by section below, in the order the file lists them. Where files go and how they are
written is results/storage.py.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from ..analysis import comm_model, memory_model, peak_model, straggler
from ..analysis.collectives import busbw_at, peak_busbw
from ..analysis.flops import mfu, tflops_per_gpu
from ..analysis.stats import Jitter, StepStats, mean_interval, mean_of
from ..config.presets import gpu_peak
from ..config.strategy_settings import settings_label
from .measurement import Measurement
from .schema import GB, SCHEMA_VERSION

if TYPE_CHECKING:
    from ..config.spec import RunSpec


def _finite(x: float | None) -> float | None:
    """JSON has no NaN: a value that could not be measured is null."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return x


def _gb(x: int | float | None) -> float | None:
    return None if x is None else x / GB


def _max_rank(per_rank: list[dict[str, Any]], key: str) -> Any:
    values = [r[key] for r in per_rank if r.get(key) is not None]
    return max(values) if values else None


def placeholder(spec: RunSpec, status: str, meta: dict[str, Any], error: str | None = None) -> dict[str, Any]:
    """The result.json a run starts with (status running), or ends with when nothing was measured."""
    return build_result(spec, Measurement(status=status, error=error), meta)


def build_result(
    spec: RunSpec, m: Measurement, meta: dict[str, Any], peak_tflops_override: float | None = None
) -> dict[str, Any]:
    """The result.json document for a run. `meta` adds session facts (command, times, options)."""
    s = StepStats.of(m.step_times)
    mean_step = s.mean if (m.ok and m.step_times) else None
    device = m.env.get("device", spec.device)
    tokens_per_sec = spec.tokens_per_step / mean_step if mean_step else None
    samples_per_sec = spec.samples_per_step / mean_step if mean_step else None
    traces = [r["trace"] for r in m.per_rank if r.get("trace")]
    h2d_gbps, h2d_source = _h2d(spec, m, traces, mean_step, device)
    losses = m.losses
    return {
        **_seed_fields(spec, m, s, mean_step, tokens_per_sec, h2d_gbps),
        **_what_ran(spec, m, device, meta),
        **_techniques(spec, m),
        "samples_per_sec": samples_per_sec,
        "tokens_per_sec_per_gpu": tokens_per_sec / spec.world_size if tokens_per_sec else None,
        **_costs(meta.get("price"), spec.world_size, samples_per_sec, tokens_per_sec),
        **_step_spread(s, m.step_times, mean_step is not None),
        **_memory(spec, m),
        "h2d_source": h2d_source,
        "h2d_link_gbps": _min_rank(m.per_rank, "h2d_link_gbps"),
        # the optimizer's share of a step (after backward to the step's end), the slowest rank's
        "optimizer_step_sec": _max_rank(m.per_rank, "optimizer_sec_mean") if m.ok else None,
        # the rank that held the others back, if one did, and what it cost a step
        "straggler": straggler.find(m.per_rank, m.step_times, device, spec.precision) if m.ok else None,
        # LLMBENCH_INJECT_FAULT's specs for this strategy: a test's fault, not the strategy's speed
        "injected_fault": _injected_fault(spec.name),
        "communication": _communication(spec, m, traces, mean_step),
        "link": m.link,
        **_epochs(spec, m),
        **_gpu_health(m.per_rank, device),
        **_flops(spec, m, device, tokens_per_sec, peak_tflops_override),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "mode": meta.get("mode"),
        "repeat": meta.get("repeat", {"index": 1, "count": 1}),
        "timing": _timing(m, meta),
        "step_times_sec": m.step_times,
        "losses": losses,
        "warmup_losses": m.warmup_losses,
        "per_rank": [_rank_view(r) for r in m.per_rank],
        "model_info": m.model,
        "strategy_config": m.strategy,
        "checks": [],
        "config": {"run": spec.to_dict(), **meta.get("config", {})},
        "metadata": {
            **m.env,
            "command": meta.get("command"),
            "test": meta.get("test"),
            "started_at": meta.get("started_at"),
            "finished_at": meta.get("finished_at"),
            "session": meta.get("session"),
        },
        "schema_version": SCHEMA_VERSION,
    }


def _injected_fault(strategy: str) -> str | None:
    # imported here: worker.faults imports torch, and this module loads with the plugin, which
    # must start without torch (tests/test_import_light.py)
    from ..worker.faults import declared

    return declared(strategy)


def _seed_fields(
    spec: RunSpec,
    m: Measurement,
    s: StepStats,
    mean_step: float | None,
    tokens_per_sec: float | None,
    h2d_gbps: float | None,
) -> dict[str, Any]:
    """The benchmark card's thirteen fields, in its order (results/schema.py: SEED_FIELDS)."""
    losses = m.losses
    return {
        "strategy": spec.name,
        "world_size": spec.world_size,
        "rank": 0,
        "seq_len": spec.seq_len,
        "tier": spec.tier,
        "steps": len(m.step_times) if mean_step is not None else 0,  # adaptive: as many as measured
        "per_device_batch": spec.per_device_batch,
        "grad_accum": spec.grad_accum,
        "tokens_per_sec": tokens_per_sec,
        "mean_step_time_sec": _finite(s.mean) if mean_step is not None else None,
        "mean_loss": sum(losses) / len(losses) if losses else None,
        "peak_vram_gb": _gb(_max_rank(m.per_rank, "peak_allocated_bytes")),
        "h2d_gbps_per_gpu": h2d_gbps,
    }


def _what_ran(spec: RunSpec, m: Measurement, device: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The outcome, and what was trained where."""
    return {
        "status": m.status,
        "error": m.error,
        "failed_ranks": m.failed_ranks,
        "model": m.model.get("name") or spec.model,
        "params": m.model.get("params"),
        "dtype": spec.dtype,
        "offload": spec.offload,
        "grad_ckpt": spec.grad_ckpt,
        "compile": spec.compile,
        "workload": spec.workload,
        "optimizer": spec.optimizer,
        "lora_rank": spec.lora_rank if spec.workload == "lora" else None,
        "trainable_params": m.model.get("trainable_params"),
        "diagnostic": spec.diagnostic,
        "data": spec.data,
        "device": device,
        "gpu_name": m.env.get("gpu_name"),
        "nodes": meta.get("nodes", 1),
        "ranks_per_node": meta.get("ranks_per_node", spec.world_size),
        # pytest-xdist: which worker ran it, how many shared the node, which devices it owned
        "node_shared": meta.get("node_shared"),
        # lanes: the GPUs and cores it had, and the configurations that trained beside it; or why
        # it had the node to itself (session/side_by_side.py)
        "side_by_side": meta.get("side_by_side"),
    }


def _techniques(spec: RunSpec, m: Measurement) -> dict[str, Any]:
    """The what-if axes as asked, what the worker applied (fp8 layers, the loss, the backend), the
    attention kernels the profiler saw run (GPU always; CPU with --llmbench-profile), and the
    strategy's settings."""
    traces = [r["trace"] for r in m.per_rank if r.get("trace")]
    seen = traces[0].get("attention_kernels") if traces else None
    return {
        "fused_loss": spec.fused_loss,
        "fp8": spec.fp8,
        "attention": spec.attention,
        # the strategy's own settings as it ran them, each with whose value it was (the suite's
        # default, the user's file, an axis), and the name of the axes' values off the defaults
        "settings": m.strategy.get("settings"),
        "settings_variant": settings_label(spec.to_dict(), spec.info),
        "attention_ran": next(iter(seen)) if seen else None,
        "techniques": {
            **(m.model.get("techniques") or {}),
            "attention_kernels": seen,
            "attention_kernels_source": f"torch.profiler over {spec.profile_steps} untimed steps, rank 0"
            if traces
            else None,
        },
    }


def _step_spread(s: StepStats, times: list[float], ok: bool) -> dict[str, Any]:
    """How steady the steps were: the plain spread, the robust jitter summary (median, MAD, IQR,
    p95/p50, outliers with their positions) and how well the mean is known (its 95% interval)."""
    jitter = Jitter.of(times) if ok else None
    interval = mean_interval(times) if ok else None
    return {
        "step_time_median_sec": _finite(s.median) if ok else None,
        "step_time_min_sec": _finite(s.min) if ok else None,
        "step_time_max_sec": _finite(s.max) if ok else None,
        "step_time_std_sec": _finite(s.std) if ok else None,
        "step_cv_in_run": _finite(s.cv) if ok else None,
        "step_time_jitter": _finite_values(jitter.to_dict()) if jitter else None,
        "step_time_mean_interval": _finite_values(interval.to_dict()) if interval else None,
    }


def _finite_values(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _finite(v) if isinstance(v, float) else v for k, v in d.items()}


def _memory(spec: RunSpec, m: Measurement) -> dict[str, Any]:
    """Peaks per rank (the largest), and the model states measured next to the ZeRO paper's."""
    predicted = memory_model.predicted_gb(
        spec.strategy,
        spec.offload,
        spec.world_size,
        spec.dtype,
        m.model.get("params"),
        m.model.get("trainable_params"),
        optimizer=spec.optimizer,
        inflight=memory_model.InFlight.of(m.model, m.strategy),
        device=m.env.get("device", spec.device),
    )
    measured = _gb(_max_rank(m.per_rank, "census_bytes"))
    gap = memory_model.gap(measured, predicted)
    host_predicted = memory_model.predicted_host_gb(
        spec.strategy, spec.offload, spec.world_size, spec.dtype, m.model.get("params"),
        inflight=memory_model.InFlight.of(m.model, m.strategy), device=m.env.get("device", spec.device),
    )  # fmt: skip
    host = _gb(_max_rank(m.per_rank, "census_host_bytes"))
    return {
        "peak_reserved_gb": _gb(_max_rank(m.per_rank, "peak_reserved_bytes")),
        "peak_host_rss_gb": _gb(_max_rank(m.per_rank, "peak_rss_bytes")),
        "model_state_gb": measured,
        "model_state_host_gb": host,
        # a warm rank starts its window where a fresh one does; what a run left behind is named
        "window_start_allocated_gb": _gb(_max_rank(m.per_rank, "window_start_allocated_bytes")),
        "leftover_after_run": _worst_leftover(m.per_rank),
        "model_state_predicted_gb": predicted,
        "model_state_gap": gap,
        # what offload keeps in host memory, predicted beside the census's host share
        "model_state_host_predicted_gb": host_predicted,
        "model_state_host_gap": memory_model.gap(host, host_predicted),
        "model_state_flag": _gap_flag(measured, predicted, gap),
        **_peak_prediction(m, _gb(_max_rank(m.per_rank, "peak_allocated_bytes"))),
    }


def _peak_prediction(m: Measurement, measured: float | None) -> dict[str, Any]:
    """The peak predicted before the run (worker/run.py, plan/predict.py) beside the measured one."""
    prediction = m.model.get("predicted_peak") or None
    predicted = prediction.get("allocated_gb") if prediction else None
    return {
        "peak_predicted_gb": predicted,
        "peak_reserved_predicted_gb": prediction.get("reserved_gb") if prediction else None,
        "peak_prediction_gap": peak_model.gap(measured, predicted),
        "peak_prediction": prediction,
    }


def _worst_leftover(per_rank: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank that kept the most after its teardown: GB beyond a fresh rank, the limit, and the
    largest tensors it still held (worker/memory.leftover)."""
    left = [r["leftover"] for r in per_rank if r.get("leftover")]
    if not left:
        return None
    worst = max(left, key=lambda x: x["bytes"])
    settings = {c["setting"]: c for x in left for c in x.get("settings") or []}
    return {
        "gb": _gb(worst["bytes"]),
        "limit_gb": _gb(worst.get("limit_bytes")),
        "within_limit": worst["bytes"] <= worst.get("limit_bytes", float("inf")),
        "tensors": worst["tensors"],
        # torch's process-wide switches a rank left changed (worker/process_settings): the group ended
        "settings": list(settings.values()),
    }


def _h2d(
    spec: RunSpec, m: Measurement, traces: list[dict[str, Any]], mean_step: float | None, device: str
) -> tuple[float | None, str | None]:
    """Host-to-device GB/s per GPU and where the figure comes from."""
    if mean_step is not None and traces and traces[0].get("h2d_bytes_per_step") is not None:
        # measured: the profiler's host-to-device copies per step, over the window's step time
        gbps = max(t["h2d_bytes_per_step"] for t in traces) / mean_step / GB
        return gbps, f"torch.profiler memcpy HtoD over {spec.profile_steps} untimed steps / mean step time"
    copied = _max_rank(m.per_rank, "h2d_bytes")
    if mean_step is not None and device == "cuda" and copied is not None and m.window_s:
        return (copied / GB) / m.window_s, "input batches copied in the window"
    return None, None


def _gpu_health(per_rank: list[dict[str, Any]], device: str) -> dict[str, Any]:
    """NVML's view of the window: the ranks' means, and any clock-event (throttle) reasons."""
    monitors = [r["gpu_monitor"] for r in per_rank if r.get("gpu_monitor")]
    return {
        "gpu_util_pct": mean_of(g["util_pct_mean"] for g in monitors),
        "gpu_power_w": mean_of(g["power_w_mean"] for g in monitors),
        "sm_clock_mhz": mean_of(g["sm_clock_mhz_mean"] for g in monitors),
        "throttled": any(g["throttled"] for g in monitors) if monitors else None,
        "throttle_reasons": sorted({k for g in monitors for k in g["clock_event_reasons"]})
        if monitors
        else None,
        "gpu_monitor_error": _first(per_rank, "gpu_monitor_error") if device == "cuda" else None,
    }


def _peak(
    spec: RunSpec, gpu_name: str | None, device: str, override: float | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The peak dense TFLOP/s MFU is taken against, with its source, or why there is none."""
    if override:
        return {"name": gpu_name, "tflops": override, "source": "--llmbench-peak-tflops"}, None
    if device != "cuda":
        return None, "no GPU: MFU compares with a GPU's peak (pass --llmbench-peak-tflops to set one)"
    if not gpu_name:
        return None, None
    peak = gpu_peak(gpu_name, spec.dtype)
    if peak:
        return {"name": peak.name, "tflops": peak.tflops, "source": peak.source}, None
    return (
        None,
        f"no {spec.dtype} peak for GPU {gpu_name!r} in fixtures/gpus.toml; pass --llmbench-peak-tflops",
    )


def _flops(
    spec: RunSpec, m: Measurement, device: str, tokens_per_sec: float | None, override: float | None
) -> dict[str, Any]:
    """Achieved TFLOP/s per GPU and MFU (PaLM's FLOPs per token; analysis/flops.py)."""
    flops_per_token = m.model.get("flops_per_token")
    tflops = (
        tflops_per_gpu(flops_per_token, tokens_per_sec, spec.world_size)
        if tokens_per_sec and flops_per_token
        else None
    )
    peak_info, reason = _peak(spec, m.env.get("gpu_name"), device, override)
    mfu_value = None
    if tflops is not None and peak_info:
        mfu_value = mfu(tflops, peak_info["tflops"])
    elif not m.ok:
        reason = f"run did not finish ({m.status})"
    return {
        "flops_per_token": flops_per_token,
        "tflops_per_gpu": tflops,
        "mfu": mfu_value,
        "mfu_reason": None if mfu_value is not None else reason,
        "peak_tflops": peak_info,
        **_fp8_mfu(spec, m.env.get("gpu_name"), tflops, peak_info),
    }


def _fp8_mfu(
    spec: RunSpec, gpu_name: str | None, tflops: float | None, peak_info: dict[str, Any] | None
) -> dict[str, Any]:
    """fp8 runs keep MFU against the bf16 dense peak (so they compare with bf16 runs, as torchtitan
    counts), labelled, and add MFU against the GPU's fp8 dense peak (as llm-foundry counts)."""
    if spec.fp8 == "none":
        return {"mfu_note": None, "mfu_vs_fp8_peak": None}
    against = f"the {peak_info['tflops']:g} TFLOP/s {spec.dtype} dense peak" if peak_info else "the bf16 peak"
    fp8_peak = gpu_peak(gpu_name, "fp8") if gpu_name else None
    return {
        "mfu_note": f"model FLOPs against {against}; matmuls in fp8 ({spec.fp8}): not a bf16 result",
        "mfu_vs_fp8_peak": mfu(tflops, fp8_peak.tflops) if (tflops is not None and fp8_peak) else None,
    }


def _timing(m: Measurement, meta: dict[str, Any]) -> dict[str, Any]:
    """How the configuration was timed, and where its wall time went: the ranks' start (warm or
    fresh, in `launch`), setup phases, DeepSpeed ops built or loaded (apart: paid once per
    machine), the measured window with its steps, the precision reached and why it stopped."""
    ops = m.timing.get("ops") or {}
    return {
        "method": m.timing_method,
        "window_sec": m.window_s,
        # rank 0's wall clock when the window opened: windows on lanes overlap in time
        "window_started_at_unix": m.timing.get("window_started_unix"),
        "sum_of_steps_sec": sum(m.step_times) if m.step_times else None,
        "setup_sec": m.setup_s,
        "setup_phases": m.timing.get("phases"),
        # rank 0's warm-up steps by the host clock (each ends on its loss): how soon a run settles
        "warmup_step_sec": m.timing.get("warmup_steps"),
        "ops": ops or None,
        "ops_build_sec": sum(o["sec"] for o in ops.values() if o.get("compiled")) if ops else None,
        "measurement": _measurement(m),
        "rank_process": m.timing.get("rank_process"),
        "launch": meta.get("launch"),
        # CUDA events summed over the steps against the host clock around the window
        "events_vs_clock": (sum(m.step_times) / m.window_s - 1) if (m.step_times and m.window_s) else None,
    }


def _measurement(m: Measurement) -> dict[str, Any] | None:
    """The measured steps, the mean's 95% interval over them, and why the window ended: a fixed
    count, the epochs, the precision reached, or the cap reached first."""
    plan = m.timing.get("measurement")
    if not m.ok or not m.step_times or plan is None:
        return None
    interval = mean_interval(m.step_times)
    return {
        **plan,
        "steps": len(m.step_times),
        "stopped": m.timing.get("stopped"),
        "precision": _finite(interval.relative) if interval else None,
        "effective_steps": interval.effective_steps if interval else None,
    }


def _costs(
    price: float | None, world_size: int, samples_per_sec: float | None, tokens_per_sec: float | None
) -> dict[str, float | None]:
    """The LoRA fine-tuning guide's cost per 1K samples (and per 1M tokens) at `price` dollars per
    GPU-hour."""
    if not price or not samples_per_sec or not tokens_per_sec:
        return {"price_per_gpu_hour": price, "cost_per_1k_samples_usd": None, "cost_per_1m_tokens_usd": None}
    per_second = price * world_size / 3600
    return {
        "price_per_gpu_hour": price,
        "cost_per_1k_samples_usd": per_second / samples_per_sec * 1000,
        "cost_per_1m_tokens_usd": per_second / tokens_per_sec * 1e6,
    }


def _gap_flag(measured: float | None, predicted: float | None, gap: float | None) -> str | None:
    if gap is None or measured is None or not predicted or abs(gap) <= memory_model.GAP_FLAG:
        return None
    return (
        f"measured model states {measured:.3f} GB are {gap:+.0%} off the ZeRO-paper prediction "
        f"{predicted:.3f} GB"
    )


def _first(per_rank: list[dict[str, Any]], key: str) -> Any:
    return next((r[key] for r in per_rank if r.get(key)), None)


def _min_rank(per_rank: list[dict[str, Any]], key: str) -> Any:
    values = [r[key] for r in per_rank if r.get(key) is not None]
    return min(values) if values else None


def _communication(
    spec: RunSpec, m: Measurement, traces: list[dict[str, Any]], mean_step: float | None
) -> dict[str, Any] | None:
    """The profiled steps' collectives as they ran (kind, bytes, count: analysis/collectives.py),
    their time, the part no computation hid, and the device span of those same steps that the
    shares are of; the bus bandwidth they achieved beside the link probe's at the same message
    size. The ZeRO paper's volumes (comm_model.py) stay beside them as the prediction."""
    params = m.model.get("params")
    if not params or mean_step is None:
        return None
    volume = comm_model.per_step(spec.strategy, params, spec.world_size, spec.dtype, spec.grad_accum)
    out: dict[str, Any] = {
        "bus_bytes_per_step": volume.bus_bytes,
        "bus_bytes_source": "modelled",
        "predicted_bus_bytes_per_step": volume.bus_bytes,
        "collectives": [list(c) for c in volume.collectives],
        "model": "ZeRO paper section 7 volumes, ring collectives (comm_model.py)",
    }
    if not traces:
        return out
    worst = max(traces, key=lambda t: t["comm_sec_per_step"])
    comm = worst["comm_sec_per_step"]
    exposed = worst.get("comm_exposed_sec_per_step")
    # the shares are of the profiled steps themselves (their device span), not of the window's
    # steps: the profiler slows a step, and a share of another step can pass 100%
    span = worst.get("device_span_sec_per_step") or worst.get("span_sec_per_step") or None
    measured = worst.get("bus_bytes_per_step")
    schedule = worst.get("collectives") or []
    count = worst["collectives_per_step"]
    out.update(
        comm_sec_per_step=comm,
        comm_exposed_sec_per_step=exposed,
        compute_sec_per_step=worst.get("compute_sec_per_step"),
        device_idle_sec_per_step=worst.get("device_idle_sec_per_step"),
        profiled_step_sec=span,
        collectives_per_step=count,
        comm_fraction_of_step=comm / span if span else None,
        exposed_fraction_of_step=exposed / span if span and exposed is not None else None,
        source=f"torch.profiler over {spec.profile_steps} untimed steps after the window, "
        "the rank with the most time in collectives",
    )
    if measured is not None:
        sizes = worst.get("comm_bytes_per_step") or 0.0
        out.update(
            bus_bytes_per_step=measured,
            bus_bytes_source="measured",
            schedule=schedule,
            mean_message_bytes=sizes / count if count else None,
        )
    out.update(_achieved(out, m.link, comm))
    return out


def _achieved(comm_out: dict[str, Any], link: dict[str, Any] | None, comm_sec: float) -> dict[str, Any]:
    """Achieved bus GB/s (bus bytes / time in collectives) and the share of the link it used: the
    link probe's busbw at the step's mean message size, for the collective that moved the most. A
    figure above the link's peak cannot be a bandwidth (collectives overlapping on streams count
    their time once): it is withheld, with the reason."""
    bus = comm_out.get("bus_bytes_per_step")
    gbps = bus / comm_sec / GB if comm_sec > 0 and bus else None
    out: dict[str, Any] = {"bus_gbps": gbps, "link_busbw_gbps": None, "link_used": None}
    out["bus_gbps_note"] = None
    if comm_out.get("bus_bytes_source") != "measured":
        out["bus_gbps_note"] = "bus bytes modelled, not measured: the profiler recorded no message sizes"
    if gbps is None or not link:
        return out
    schedule = comm_out.get("schedule") or []
    kind = schedule[0]["kind"] if schedule else "all_reduce"
    at = busbw_at(link, kind, comm_out.get("mean_message_bytes") or 0) or peak_busbw(link)
    peak = peak_busbw(link)
    if peak and gbps > peak:
        out.update(
            bus_gbps=None,
            bus_gbps_note=f"{gbps:.1f} GB/s from the bytes and time measured is above the link's peak "
            f"{peak:.1f} GB/s: collectives overlapped on several streams, or the sizes are incomplete",
        )
        return out
    out.update(link_busbw_gbps=at, link_used=gbps / at if at else None)
    return out


def _epochs(spec: RunSpec, m: Measurement) -> dict[str, Any]:
    """Epoch-based runs (seq2seq): each measured epoch's wall time, the slowest rank's compute in
    it, the time no step ran (wall less compute: on a GPU, the device idle between steps), the
    host's wait for the DataLoader (which on a GPU may overlap queued work), and throughput over
    the wall clock, which is where slow storage shows."""
    if spec.workload != "seq2seq":
        return {}
    empty = {
        "epochs": None,
        "epoch_wall_sec_mean": None,
        "epoch_samples_per_sec": None,
        "data_wait_sec_per_epoch": None,
        "data_wait_fraction": None,
        "idle_fraction": None,
        "data_source": _first(m.per_rank, "data_source"),
    }
    ranks = [r["epochs"] for r in m.per_rank if r.get("epochs")]
    if not m.ok or not ranks or not m.step_times:
        return empty
    out, start = [], 0
    for index, first in enumerate(ranks[0]):
        steps = first["steps"]
        wall = max(r[index]["wall_sec"] for r in ranks)
        samples = first["samples_per_rank"] * spec.world_size
        compute = sum(m.step_times[start : start + steps])
        out.append(
            {
                "epoch": first["epoch"],
                "steps": steps,
                "samples": samples,
                "wall_sec": wall,
                "compute_sec": compute,
                "idle_sec": max(0.0, wall - compute),
                "data_wait_sec": max(r[index]["data_wait_sec"] for r in ranks),
                "samples_per_sec": samples / wall if wall > 0 else None,
            }
        )
        start += steps
    walls = sum(e["wall_sec"] for e in out)
    waits = sum(e["data_wait_sec"] for e in out)
    idle = sum(e["idle_sec"] for e in out)
    return {
        **empty,
        "epochs": out,
        "epoch_wall_sec_mean": walls / len(out),
        "epoch_samples_per_sec": sum(e["samples"] for e in out) / walls if walls > 0 else None,
        "data_wait_sec_per_epoch": waits / len(out),
        "data_wait_fraction": waits / walls if walls > 0 else None,
        "idle_fraction": idle / walls if walls > 0 else None,
    }


def _rank_view(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "rank": r.get("rank"),
        "pid": r.get("pid"),
        "status": r.get("status"),
        "mean_step_time_sec": r.get("mean_step_time_sec"),
        "optimizer_sec_mean": r.get("optimizer_sec_mean"),
        "model_state_gb": _gb(r.get("census_bytes")),
        "model_state_host_gb": _gb(r.get("census_host_bytes")),
        "peak_allocated_gb": _gb(r.get("peak_allocated_bytes")),
        "peak_reserved_gb": _gb(r.get("peak_reserved_bytes")),
        "peak_host_rss_gb": _gb(r.get("peak_rss_bytes")),
        "device_total_gb": _gb(r.get("device_total_bytes")),
        "alloc_retries": r.get("alloc_retries"),
        "window_start_allocated_gb": _gb(r.get("window_start_allocated_bytes")),
        "leftover_gb": _gb((r.get("leftover") or {}).get("bytes")),
        "h2d_link_gbps": r.get("h2d_link_gbps"),
        "gpu_monitor": r.get("gpu_monitor"),
        "profile": r.get("trace"),
        "epochs": r.get("epochs"),
        "gc_pauses": r.get("gc_pauses"),
    }


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
