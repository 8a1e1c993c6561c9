"""How long the rest of the session will take: each configuration's expected cost, corrected by
the configurations that already finished. Standard library only.

Before a configuration runs, its cost is guessed in seconds (`expected_seconds`): a fixed start
(torchrun, imports, rendezvous, building the model) plus every step it will run (warm-up,
measured, profiled) at 6 x parameters x tokens FLOPs (the PaLM count without attention) per rank,
at a sustained rate per rank, times a factor for optimizer offload. The constants come from issue
14's runs: on the 2-core CPU machine llama-tiny trains at about 4e10 FLOP/s per rank and a
configuration costs about 10 s outside its steps; on 1x H100 llama-1b DDP sustains about 3e14
FLOP/s (0.31 s per step), ZeRO-2 with CPU offload takes about 9 times as long per step, and a
configuration costs about 25 s outside its steps. They only set the configurations' weights
relative to one another: as configurations finish, each remaining one's guess is scaled by the
measured/guessed ratio of the finished ones with the same strategy, else of all finished ones
(a ratio estimator), so a machine twice as fast as the guess halves the ETA after the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config.presets import resolve_model
from ..config.spec import SpecError

if TYPE_CHECKING:
    from ..config.spec import RunSpec

START_S = {"cpu": 10.0, "cuda": 25.0}
"""Seconds a configuration costs outside its steps (measured: ~10 s on CPU, 13 + 11 s on H100)."""
RANK_FLOPS = {"cpu": 4e10, "cuda": 3e14}
"""Training FLOP/s one rank sustains (measured: llama-tiny on a CPU core, llama-1b DDP on H100)."""
OFFLOAD_FACTOR = {"none": 1.0, "cpu": 8.0, "nvme": 12.0}
"""Step-time multiple of optimizer offload (measured: zero2_offload ~9x DDP's step on H100)."""
_UNKNOWN_PARAMS = 100e6


def _params(spec: RunSpec) -> float:
    """The model's parameter count: the preset's, else estimated from its config's shapes."""
    try:
        preset = resolve_model(spec.model, spec.model_config)
    except SpecError:
        return _UNKNOWN_PARAMS
    if preset.params:
        return float(preset.params)
    c = preset.config
    width = c.get("hidden_size") or c.get("n_embd") or c.get("d_model")
    layers = (
        c.get("num_hidden_layers")
        or c.get("n_layer")
        or ((c.get("num_encoder_layers") or 0) + (c.get("num_decoder_layers") or 0))
    )
    if not width or not layers:
        return _UNKNOWN_PARAMS
    return 12.0 * layers * width**2 + 2.0 * c.get("vocab_size", 32000) * width


def expected_seconds(spec: RunSpec, repeats: int = 1) -> float:
    """A rough guess of one configuration's wall time; see the module's docstring."""
    steps = spec.warmup + spec.steps + spec.profile_steps
    flops_per_rank = 6.0 * _params(spec) * spec.tokens_per_step / spec.world_size
    step_s = flops_per_rank / RANK_FLOPS.get(spec.device, RANK_FLOPS["cpu"])
    step_s *= OFFLOAD_FACTOR.get(spec.offload, 1.0)
    return repeats * (START_S.get(spec.device, START_S["cpu"]) + steps * step_s)


@dataclass(frozen=True)
class Planned:
    """One configuration the session will run."""

    nodeid: str
    label: str
    """What the display calls it: the test's name, e.g. test_pretrain[zero2-ws1-seq128-llama-tiny]."""
    group: str
    """Configurations whose measured cost teaches about each other's: the strategy's name."""
    expected_s: float
    at_once: int = 1
    """How many configurations train at once while this one does (its world size's lanes,
    session/side_by_side.py): its time counts that much less towards the session's."""

    def to_dict(self) -> dict[str, object]:
        return {
            "nodeid": self.nodeid,
            "label": self.label,
            "group": self.group,
            "expected_s": self.expected_s,
            "at_once": self.at_once,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Planned:
        return cls(
            str(data["nodeid"]),
            str(data["label"]),
            str(data["group"]),
            float(data["expected_s"]),  # type: ignore[arg-type]
            int(data.get("at_once", 1)),  # type: ignore[call-overload]
        )


@dataclass
class Eta:
    """The plan, what has started and finished, and the time left."""

    plan: dict[str, Planned]
    started: dict[str, float] = field(default_factory=dict)
    """nodeid -> when it started (monotonic seconds)."""
    finished: dict[str, float | None] = field(default_factory=dict)
    """nodeid -> its wall time, or None when it ended without teaching anything (skipped, stopped)."""
    walls: dict[str, float | None] = field(default_factory=dict)
    """nodeid -> its wall time, learnt from or not."""

    def start(self, nodeid: str, now: float) -> int:
        """Mark it started; returns its place k among the started ones (1-based)."""
        self.started.setdefault(nodeid, now)
        return list(self.started).index(nodeid) + 1

    def place(self, nodeid: str) -> int | None:
        """Its k among the started ones (1-based), or None if it never started."""
        return list(self.started).index(nodeid) + 1 if nodeid in self.started else None

    def finish(self, nodeid: str, now: float, learn: bool = True) -> float | None:
        """Mark it finished; returns its wall time, learnt from only when `learn`. The first
        finish counts: a configuration that ran on a lane ended before its test reported it."""
        if nodeid in self.walls:
            return self.walls[nodeid]
        began = self.started.get(nodeid)
        wall = now - began if began is not None else None
        self.walls[nodeid] = wall
        self.finished[nodeid] = wall if learn else None
        return wall

    def running(self) -> int:
        """Configurations started and not finished."""
        return sum(1 for n in self.started if n not in self.finished)

    def _scale(self, group: str) -> float:
        """Measured over guessed seconds of the finished ones, same group first."""
        for same_group in (True, False):
            pairs = [
                (wall, self.plan[n].expected_s)
                for n, wall in self.finished.items()
                if wall is not None and n in self.plan and (not same_group or self.plan[n].group == group)
            ]
            guessed = sum(g for _, g in pairs)
            if guessed > 0:
                return sum(w for w, _ in pairs) / guessed
        return 1.0

    def remaining_s(self, now: float, workers: int = 1) -> float:
        """Seconds until every planned configuration has finished, with `workers` running at once
        (pytest-xdist), each configuration's time shared with those that run beside it (lanes)."""
        total, longest = 0.0, 0.0
        for nodeid, planned in self.plan.items():
            if nodeid in self.finished:
                continue
            left = self._scale(planned.group) * planned.expected_s
            if nodeid in self.started:
                left = max(left - (now - self.started[nodeid]), 0.0)
                longest = max(longest, left)
            total += left / max(planned.at_once, 1)
        return max(total / max(workers, 1), longest)

    def done_fraction(self, now: float) -> float:
        """Share of the session's expected cost behind it (for the bar)."""
        total = sum(p.expected_s for p in self.plan.values())
        if not total:
            return 1.0
        done = sum(p.expected_s for n, p in self.plan.items() if n in self.finished)
        for nodeid, began in self.started.items():
            planned = self.plan.get(nodeid)
            if planned is not None and nodeid not in self.finished:
                expected = self._scale(planned.group) * planned.expected_s
                done += planned.expected_s * min((now - began) / expected, 0.95) if expected else 0.0
        return min(done / total, 1.0)
