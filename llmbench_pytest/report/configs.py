"""Configurations: the runs of one setup (repeats included) summed up as one row.

Standard library only. Two runs are the same configuration when they trained the same model
with the same strategy, shapes, precision, world size and hardware; a repeated run (`-r2`, ...)
adds a sample, and the spread of the repeats is the measured run-to-run noise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..analysis.stats import mean_of, spread_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from .collect import Run

# The order strategies are listed in everywhere (tables, legends): native PyTorch first, then
# DeepSpeed by ZeRO stage, then the offload variants.
STRATEGY_ORDER = (
    "ddp",
    "fsdp_grad_op",
    "fsdp",
    "zero0",
    "zero1",
    "zero2",
    "zero3",
    "zero1_offload",
    "zero2_offload",
    "zero3_offload",
    "zero3_nvme",
)


def strategy_rank(name: str) -> tuple[int, str]:
    return (STRATEGY_ORDER.index(name) if name in STRATEGY_ORDER else len(STRATEGY_ORDER), name)


class ConfigKey(NamedTuple):
    model: str
    seq_len: int
    per_device_batch: int
    grad_accum: int
    dtype: str
    grad_ckpt: bool
    compile: bool
    """torch.compile'd runs are another configuration, never repeats of eager ones."""
    fused_loss: str
    """The technique axes (none/default for runs that predate them): each value is its own
    configuration; markdown_techniques.py compares them."""
    fp8: str
    attention: str
    settings_variant: str
    """A strategy's settings off the suite's defaults ('' at them): its own configuration."""
    workload: str
    """causal_lm, lora or seq2seq."""
    optimizer: str
    lora_rank: int
    """0 outside the lora workload."""
    data: str
    """memory or disk (seq2seq)."""
    hardware: str
    """GPU name, 'CPU' or 'unknown device'."""
    nodes: int
    world_size: int
    strategy: str

    @property
    def scenario(self) -> tuple[Any, ...]:
        """Everything but the strategy: the runs a recommendation chooses between."""
        return tuple(self[:-1])

    @property
    def global_batch(self) -> int:
        return self.world_size * self.per_device_batch * self.grad_accum

    def sort_key(self) -> tuple[Any, ...]:
        shape = self[: self._fields.index("hardware") + 1]
        return (*shape, self.world_size, self.nodes, strategy_rank(self.strategy))


def config_key(run: Run) -> ConfigKey:
    d = run.data
    return ConfigKey(
        model=str(d.get("model") or "?"),
        seq_len=int(d.get("seq_len") or 0),
        per_device_batch=int(d.get("per_device_batch") or 0),
        grad_accum=int(d.get("grad_accum") or 1),
        dtype=str(d.get("dtype") or "?"),
        grad_ckpt=bool(d.get("grad_ckpt")),
        compile=bool(d.get("compile")),
        fused_loss=str(d.get("fused_loss") or "none"),
        fp8=str(d.get("fp8") or "none"),
        attention=str(d.get("attention") or "default"),
        settings_variant=str(d.get("settings_variant") or ""),
        workload=str(d.get("workload") or "causal_lm"),
        optimizer=str(d.get("optimizer") or "adamw_torch"),
        lora_rank=int(d.get("lora_rank") or 0),
        data=str(d.get("data") or "memory"),
        hardware=run.hardware,
        nodes=int(d.get("nodes") or 1),
        world_size=run.world_size,
        strategy=run.strategy,
    )


def one_session_each(runs: Iterable[Run]) -> tuple[list[Run], list[str]]:
    """Runs of one configuration from several pytest sessions (the same command run twice into one
    folder) are not repeats of each other, and are never averaged as such: the newest session's
    are kept, and a note names the sessions left out. Repeats are the runs of one session
    (--llmbench-repeat). Results written before sessions were named count as one session."""
    by_config: dict[ConfigKey, dict[str, list[Run]]] = {}
    for run in runs:
        by_config.setdefault(config_key(run), {}).setdefault(run.session, []).append(run)
    kept: list[Run] = []
    notes: list[str] = []
    for key, sessions in by_config.items():
        newest = max(sessions, key=lambda s: max(_started(r) for r in sessions[s]))
        kept += sessions[newest]
        if len(sessions) > 1:
            older = ", ".join(f"{s} ({len(sessions[s])} run(s), {min(_started(r) for r in sessions[s])})"
                              for s in sessions if s != newest)  # fmt: skip
            notes.append(
                f"{key.strategy} ws{key.world_size} {key.model} seq{key.seq_len}: runs from {len(sessions)} "
                f"sessions; read only the newest, session {newest} ({len(sessions[newest])} run(s)), "
                f"and left out {older}. Runs of separate sessions are not repeats: "
                "compare them with `llmbench compare results/A results/B` or `llmbench gate "
                "--baseline results/A --current results/B` (A, B: the sessions' folders)."
            )
    order = {id(r): i for i, r in enumerate(runs)} if isinstance(runs, list) else {}
    kept.sort(key=lambda r: order.get(id(r), 0))
    return kept, notes


def sessions_read(runs: Iterable[Run]) -> str:
    """'session 20261125-173012-1a2b3c4d (18 runs)' or 'sessions A (3 runs), B (5 runs)': the sessions
    a report, comparison or gate read, oldest first; '' where no run names its session (results
    written before sessions were named)."""
    count: dict[str, int] = {}
    for run in sorted(runs, key=_started):
        count[run.session] = count.get(run.session, 0) + 1
    if set(count) <= {"unnamed"}:
        return ""
    named = ", ".join(f"{s} ({n} run{'s' if n != 1 else ''})" for s, n in count.items())
    return f"session{'s' if len(count) != 1 else ''} {named}"


def _started(run: Run) -> str:
    return str((run.data.get("metadata") or {}).get("started_at") or "")


@dataclass(frozen=True)
class Config:
    """One configuration: its runs and their numbers (means over the runs that finished)."""

    key: ConfigKey
    runs: tuple[Run, ...]
    """Every run of this configuration, finished or not."""

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def ok(self) -> bool:
        return bool(self.ok_runs)

    @property
    def is_cpu(self) -> bool:
        return self.key.hardware == "CPU"

    @property
    def strategy(self) -> str:
        return self.key.strategy

    @property
    def world_size(self) -> int:
        return self.key.world_size

    def mean(self, field: str) -> float | None:
        return self.mean_by(lambda d: d.get(field))

    def mean_by(self, get: Callable[[Mapping[str, Any]], Any]) -> float | None:
        """The mean over the finished runs of one reading, None when none has it."""
        return mean_of(get(r.data) for r in self.ok_runs)

    @property
    def tokens_per_sec(self) -> float | None:
        return self.mean("tokens_per_sec")

    @property
    def tokens_per_sec_spread(self) -> float | None:
        """Standard deviation of tokens/s across repeats (run-to-run), when there are two or more."""
        return spread_of(r.data.get("tokens_per_sec") for r in self.ok_runs)

    @property
    def step_time(self) -> float | None:
        return self.mean("mean_step_time_sec")

    @property
    def step_time_std(self) -> float | None:
        """Within-run step-time standard deviation, averaged over the runs."""
        return self.mean("step_time_std_sec")

    @property
    def step_cv_in_run(self) -> float | None:
        """The coefficient of variation of the step times within each run, averaged over the runs."""
        return self.mean("step_cv_in_run")

    @property
    def window(self) -> tuple[float | None, str | None]:
        """How well the mean step time is known, and what ended the measured window: the widest
        relative 95% half-width over the finished runs, and the reasons their windows stopped
        ('precision', 'budget', 'cap', 'fixed', 'epochs'), joined when they differ."""
        measured = [m for r in self.ok_runs if (m := (r.data.get("timing") or {}).get("measurement"))]
        widths = [m["precision"] for m in measured if m.get("precision") is not None]
        reasons = sorted({str(m.get("stopped")) for m in measured if m.get("stopped")})
        return (max(widths) if widths else None), ("/".join(reasons) or None)

    @property
    def memory_gb(self) -> float | None:
        """The highest peak of any run: a configuration needs what its hungriest repeat needed."""
        values = [r.memory_gb for r in self.runs if r.memory_gb is not None]
        return max(values) if values else None

    @property
    def memory_kind(self) -> str:
        return self.runs[0].memory_kind

    @property
    def model_state_gb(self) -> float | None:
        return self.mean("model_state_gb")

    @property
    def mfu(self) -> float | None:
        return self.mean("mfu")

    @property
    def mfu_reason(self) -> str | None:
        reasons = [r.data.get("mfu_reason") for r in self.runs if r.data.get("mfu_reason")]
        return reasons[0] if reasons else None

    @property
    def h2d_gbps(self) -> float | None:
        return self.mean("h2d_gbps_per_gpu")

    @property
    def fits(self) -> bool:
        """At least one run finished, and no run went over the memory limit or ran out of memory."""
        return self.ok and not any(r.memory_check_failed or r.status == "oom" for r in self.runs)

    @property
    def status(self) -> str:
        """'ok', or the statuses with counts when not every run finished ('ok 2/3, oom 1/3')."""
        counts = Counter(r.status for r in self.runs)
        if set(counts) == {"ok"}:
            return "ok"
        n = len(self.runs)
        if len(counts) == 1:
            return next(iter(counts)) + (f" {n}/{n}" if n > 1 else "")
        return ", ".join(f"{s} {c}/{n}" for s, c in counts.most_common())

    @property
    def failed_check_names(self) -> list[str]:
        return sorted({str(c.get("name")) for r in self.runs for c in r.failed_checks})

    def label(self) -> str:
        return f"{self.strategy} ws{self.world_size}"


def group_configs(runs: Iterable[Run]) -> list[Config]:
    """Runs grouped by configuration, in a stable order (model, shapes, world size, strategy)."""
    groups: dict[ConfigKey, list[Run]] = {}
    for run in runs:
        groups.setdefault(config_key(run), []).append(run)
    return [Config(k, tuple(groups[k])) for k in sorted(groups, key=ConfigKey.sort_key)]


def technique_label(key: ConfigKey) -> str:
    """'loss chunked, fp8 tensorwise, attention flash' for the axes off their defaults; '' if none is."""
    parts = [f"loss {key.fused_loss}" if key.fused_loss != "none" else ""]
    parts.append(f"fp8 {key.fp8}" if key.fp8 != "none" else "")
    parts.append(f"attention {key.attention}" if key.attention != "default" else "")
    return ", ".join(p for p in parts if p)


def scenario_title(key: ConfigKey) -> str:
    """'llama-1b, seq 2048, batch 4x1, bf16 on 2x NVIDIA H200' for headings and captions."""
    ckpt = (", activation checkpointing" if key.grad_ckpt else "") + (
        ", torch.compile" if key.compile else ""
    )
    where = (
        f"{key.world_size} CPU rank{'s' if key.world_size > 1 else ''} (CPU smoke)"
        if key.hardware == "CPU"
        else f"{key.world_size}x {key.hardware}"
    )
    nodes = f" over {key.nodes} nodes" if key.nodes > 1 else ""
    what = {"lora": f"LoRA r{key.lora_rank} on ", "seq2seq": "encoder-decoder "}.get(key.workload, "")
    extras = ckpt
    extras += f", {technique_label(key)}" if technique_label(key) else ""
    extras += f", {key.optimizer}" if key.optimizer != "adamw_torch" else ""
    extras += ", data from disk" if key.data == "disk" else ""
    return (
        f"{what}{key.model}, seq {key.seq_len}, batch {key.per_device_batch}x{key.grad_accum} per rank, "
        f"{key.dtype}{extras} on {where}{nodes}"
    )
