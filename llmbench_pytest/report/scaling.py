"""Scaling efficiency: how much of N times the throughput N GPUs deliver.

    efficiency(N) = T(N) / (N * T(1))                 against a measured 1-GPU run
    efficiency(N) = T(N) / ((N / N0) * T(N0))         otherwise, N0 = smallest world size measured

T is tokens/s over the whole job. Two series are possible for a configuration, and the report
labels which one a number comes from:

- weak scaling: the per-device batch (batch x grad accumulation) is fixed, so the global batch
  grows with N; ideal throughput is N times the baseline's.
- strong scaling: the global batch (world size x batch x grad accumulation) is fixed, so each
  GPU gets less work as N grows; ideal step time is the baseline's divided by N, which is again
  N times the throughput.

A series with a measured 1-GPU run is preferred over one without, weak over strong. The benchmark
card's "50% at 2 GPUs as baseline" is a convention this project does not copy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.scaling import efficiency, lost_time
from . import fmt

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .collect import Run
    from .configs import Config, ConfigKey


@dataclass(frozen=True)
class Scaling:
    """Where a configuration stands against its baseline."""

    mode: str
    """'weak' (fixed per-device batch) or 'strong' (fixed global batch)."""
    baseline: Config
    """The configuration measured at the baseline world size."""
    efficiency: float
    """T(N) / ((N / N0) * T(N0)); 1.0 is linear scaling."""

    @property
    def baseline_ws(self) -> int:
        return self.baseline.world_size

    @property
    def against_one_gpu(self) -> bool:
        return self.baseline_ws == 1

    @property
    def one(self) -> str:
        """'1-GPU run', or '1-rank run' on CPU."""
        return "1-rank run" if self.baseline.is_cpu else "1-GPU run"

    def describe(self) -> str:
        if self.against_one_gpu:
            return f"{self.mode} scaling against a measured {self.one}"
        return f"{self.mode} scaling against world size {self.baseline_ws} (smallest measured; no {self.one})"

    def is_baseline(self, config: Config) -> bool:
        return config.key == self.baseline.key


def _series_key(key: ConfigKey, mode: str) -> tuple[Any, ...]:
    common = (
        key.model,
        key.seq_len,
        key.dtype,
        key.grad_ckpt,
        key.compile,
        key.fused_loss,
        key.fp8,
        key.attention,
        key.settings_variant,
        key.workload,
        key.optimizer,
        key.lora_rank,
        key.data,
        key.hardware,
        key.strategy,
    )
    if mode == "weak":
        return (*common, key.per_device_batch, key.grad_accum)
    return (*common, key.global_batch)


def weak_series(key: ConfigKey) -> tuple[Any, ...]:
    """What a configuration's runs at several world sizes share under weak scaling (plan/scale.py
    groups them by it)."""
    return _series_key(key, "weak")


def scaling_table(configs: Sequence[Config]) -> dict[ConfigKey, Scaling]:
    """The scaling of every configuration that has a comparable run at another world size."""
    series: dict[tuple[Any, ...], list[Config]] = {}
    for c in configs:
        if c.tokens_per_sec is None:
            continue
        for mode in ("weak", "strong"):
            series.setdefault((mode, *_series_key(c.key, mode)), []).append(c)

    out: dict[ConfigKey, Scaling] = {}
    for c in configs:
        t = c.tokens_per_sec
        if t is None:
            continue
        choices: list[tuple[str, Config]] = []
        for mode in ("weak", "strong"):
            members = series.get((mode, *_series_key(c.key, mode)), [])
            if len({m.world_size for m in members}) < 2:
                continue  # one world size only: nothing to scale against
            base = min(members, key=lambda m: (m.world_size, m.key.nodes, m.key.per_device_batch))
            choices.append((mode, base))
        if not choices:
            continue
        # a measured 1-GPU baseline wins over the smallest world size; weak wins ties
        mode, base = min(choices, key=lambda mb: (mb[1].world_size != 1, mb[0] != "weak"))
        t0 = base.tokens_per_sec
        assert t0 is not None
        out[c.key] = Scaling(mode, base, efficiency(t, c.world_size, t0, base.world_size))
    return out


def efficiency_of_run(tokens_per_sec: float | None, world_size: int, scaling: Scaling | None) -> float | None:
    """One run's efficiency against its configuration's baseline (for metrics.csv rows)."""
    if scaling is None or tokens_per_sec is None:
        return None
    t0 = scaling.baseline.tokens_per_sec
    if not t0:
        return None
    return efficiency(tokens_per_sec, world_size, t0, scaling.baseline_ws)


LOSS_NOTES = (
    "*Lost per step*: the window's mean step less the step linear scaling would give (the "
    "baseline's, for as many tokens per GPU), split by the profiled steps into exposed communication "
    "(collectives no computation hid), waiting for the slowest rank (the spread of time in collectives "
    "over the ranks), host work (the device idle, waiting for its host: offload's optimizer and "
    "copies) and what the profile does not explain; each less the baseline's own. *n/a*: a run that "
    "was not profiled (a 1-GPU run without offload is not: it exposes nothing, and its host work is "
    "not measured).",
)


def loss_cells(config: Config, scaling: Scaling) -> list[str]:
    """'0.041 / 0.003 / n/a / 0.002 s' and the part that explains most, for the scaling table."""
    runs, base = config.ok_runs, scaling.baseline.ok_runs
    lost = lost_time(dict(runs[0].data), dict(base[0].data)) if runs and base else None
    if lost is None:
        return [fmt.NA, fmt.NA]
    if lost.lost_sec <= 0:
        return ["none", "-"]
    if not lost.profiled:
        return [f"{lost.lost_sec:.3f} s (not profiled)", "-"]
    cells = " / ".join("n/a" if v is None else f"{v:.3f}" for v in lost.parts().values())
    return [f"{cells} s", lost.main_cause() or "-"]


def baseline_cell(config: Config, scaling: Scaling) -> str:
    """'ws1 (measured 1-GPU run)', naming the baseline's session where it is not the run's own (a
    report over several sessions, one per world size)."""
    text = f"ws{scaling.baseline_ws}" + (
        f" (measured {scaling.one})" if scaling.against_one_gpu else f" (smallest measured; no {scaling.one})"
    )
    mine, theirs = _session(config), _session(scaling.baseline)
    if theirs and theirs != mine:
        text += f", session {theirs}"
    return text


def _session(config: Config) -> str | None:
    for run in config.runs:
        session = (run.data.get("metadata") or {}).get("session")
        if isinstance(session, str):
            return session
    return None


def group(runs: Sequence[Run]) -> dict[str, list[dict[str, Any]]]:
    """Configurations (every setting but the world size, weak scaling) -> their runs' result.json,
    one per world size (the last read where a folder holds one twice; a multi-node run and a
    one-node run at the same world size are one series, as `weak_series` has it). Each
    configuration's name says every setting it does not share with the suite's defaults (the
    LoRA diagnostic's 'dtype=fp16' and 'lora_rank=8' beside the plain LoRA run), whatever else the
    folder holds, so that the same configuration is named alike in every folder (the kept
    validation files match by name) and no two merge; two that still share a name (one folder of
    two GPU models) get what tells them apart appended."""
    from .configs import config_key

    out: dict[Any, dict[int, dict[str, Any]]] = {}
    names: dict[Any, str] = {}
    keys: dict[Any, ConfigKey] = {}
    for run in runs:
        r = run.data
        if r.get("status") != "ok" or not r.get("mean_step_time_sec"):
            continue
        config = config_key(run)
        key = weak_series(config)
        out.setdefault(key, {})[int(r.get("world_size") or 1)] = r
        if key not in keys:  # the series' first run names it
            keys[key] = config
            names[key] = " ".join([_name(r), *_settings(config)])
    names = _told_apart(names, keys)
    return {names[k]: [v[w] for w in sorted(v)] for k, v in out.items()}


def _spec_default(name: str) -> Any:
    from ..config.spec import RunSpec

    return next(f.default for f in dataclasses.fields(RunSpec) if f.name == name)


def _settings(key: ConfigKey) -> list[str]:
    """The settings of `key` the short name leaves out and the suite's defaults do not have: the
    precision other than the one a run of its workload and device gets by default (fp32 on a
    CPU, fp16 for the encoder-decoder, bf16 otherwise: launch/matrix.py), a LoRA rank other than
    RunSpec's, another optimizer, and the techniques turned on."""
    usual = "fp32" if key.hardware == "CPU" else "fp16" if key.workload == "seq2seq" else "bf16"
    out = [f"dtype={key.dtype}"] if key.dtype != usual else []
    if key.workload == "lora" and key.lora_rank != _spec_default("lora_rank"):
        out.append(f"lora_rank={key.lora_rank}")
    if key.optimizer != _spec_default("optimizer"):
        out.append(f"optimizer={key.optimizer}")
    out += [flag for flag, on in (("grad_ckpt", key.grad_ckpt), ("compile", key.compile)) if on]
    for field, off in (
        ("fused_loss", "none"),
        ("fp8", "none"),
        ("attention", "default"),
        ("settings_variant", ""),
    ):
        if getattr(key, field) != off:
            out.append(f"{field}={getattr(key, field)}")
    return out


def _told_apart(names: dict[Any, str], keys: dict[Any, ConfigKey]) -> dict[Any, str]:
    """`names` with each name that several configurations still share suffixed by what differs
    between them (the GPU model, a precision on a GPU without bf16), and numbered past that: a
    configuration is never lost to another's name."""
    from .configs import ConfigKey

    shared: dict[str, list[Any]] = {}
    for k, name in names.items():
        shared.setdefault(name, []).append(k)
    out = dict(names)
    fields = [f for f in ConfigKey._fields if f not in ("world_size", "nodes")]  # not a series' own
    for name, ks in shared.items():
        if len(ks) < 2:
            continue
        differ = [f for f in fields if len({getattr(keys[k], f) for k in ks}) > 1]
        for k in ks:
            out[k] = " ".join([name, *(f"{f}={getattr(keys[k], f)}" for f in differ)])
        if len({out[k] for k in ks}) < len(ks):  # alike in every field read (a value read two ways)
            out.update({k: f"{out[k]} #{i + 1}" for i, k in enumerate(ks)})
    return out


def _name(r: dict[str, Any]) -> str:
    extra = [str(r.get("workload"))] if r.get("workload") not in (None, "causal_lm") else []
    if r.get("data") not in (None, "memory"):
        extra.append(str(r.get("data")))
    batch = f"b{r.get('per_device_batch')}x{r.get('grad_accum')}"
    return " ".join([str(r.get("strategy")), str(r.get("model")), f"seq{r.get('seq_len')}", batch, *extra])
