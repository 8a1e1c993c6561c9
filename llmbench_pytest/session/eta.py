"""How long the rest of the session will take: each configuration's expected cost, corrected by
the configurations that already finished. Standard library only.

Before a configuration runs, its cost is guessed in seconds (`expected_seconds`): a start (the
rank's set-up outside its steps, by whether its ranks are the session's first, a new group or warm
ones: START_S; offload's pinning of host memory on top) plus its unmeasured steps
(warm-up, profiled) and its measured window, each step at 6 x parameters x tokens FLOPs (the PaLM
count without attention) per rank at a sustained rate per rank, times a factor for optimizer
offload. An adaptive window with a time budget (a GPU's) is guessed at a share of the budget, or its
minimum steps where those take longer, never more than its step cap: a quarter where the step is
steady (it stops at its precision after 10 to 15 steps), all of it for ZeRO-3 and offload, whose
host-bound steps run to the budget (WINDOW_BUDGET_SHARE). The constants: on the 2-core CPU machine
llama-tiny trains at about 4e10 FLOP/s per rank (START_S: the seconds outside its steps); on 1x
H100 llama-1b DDP sustains about 3e14 FLOP/s (0.31 s per step); on 2x H200 and 1x H100 (2026-11-26
and 27) offload's steps took about 2 x DDP's and its set-up 7-10 s more.

As configurations finish, each remaining one's guess is scaled by the measured/guessed ratio of the
finished ones with the same strategy, else of all finished ones (a ratio estimator), that last one
drawn towards 1 by a prior worth half the plan's guessed seconds: the suite's configurations differ
by more than any one factor can tell (a DDP window that stops after 10 steps says little of a ZeRO-3
one that runs to its budget), so a few quick ones must not shrink every other guess. The price: on a
machine uniformly faster or slower than the guesses, a strategy not yet run follows the others only
as evidence builds up (once half the plan's guessed seconds have run, halfway). Replayed over
15 GPU sessions' result files (tools/eta_replay.py, docs/results/2026-11-27-eta-replay), the first
ETA came within 0.87-1.29 of the session's length (before: 4.0-7.8 times it), the ETA's median
error over a session fell from 23% to 8% (the median of the sessions), its largest from 103% to 29%.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config.presets import params_of, resolve_model
from ..config.spec import SpecError

if TYPE_CHECKING:
    from ..config.spec import RunSpec

START_S = {
    "cpu": {"session": 5.5, "group": 2.0, "warm": 1.0},
    "cuda": {"session": 5.0, "group": 5.0, "warm": 5.0},
}
"""Seconds a configuration costs outside its steps, by how its ranks start (start_kind): the
session's first configuration (on a Linux CPU the launcher's fork server imports torch, transformers
and DeepSpeed then), a later world size's first (a new group of ranks, its link probe), or a warm
rank's. Measured on the 2-core CPU VM (2026-11-28, the README's first run, twice: each configuration
from its start to its end, less its steps): 5.6-6.2 s for the session's first, 1.9-2.5 s for the
first at two ranks (1.2 s of it the link probe), 0.3-2.3 s for a warm one (DeepSpeed's wrap 0.9 s).
The 10 s per configuration guessed before (fresh processes, before ranks were forks kept warm) put
the first ETA of that 17-22 s session at 1:04. On a GPU one figure stands for all three: 5 s replayed
the 15 kept GPU sessions within 0.87-1.29 of their length, where a warm rank's configuration spends
1-2 s outside its steps and a group's first 10-15 s (2x H200 and 1x H100, 2026-11-26 and 27)."""
RANK_FLOPS = {"cpu": 4e10, "cuda": 3e14}
"""Training FLOP/s one rank sustains (measured: llama-tiny on a CPU core, llama-1b DDP on H100)."""
OFFLOAD_FACTOR = {
    "cpu": {"none": 1.0, "cpu": 8.0, "nvme": 12.0},
    "cuda": {"none": 1.0, "cpu": 2.2, "nvme": 12.0},
}
"""Step-time multiple of optimizer offload, by device (a GPU: zero2_offload 1.9-2.3x DDP's step on
2x H200 with each rank's share of the cores, 2026-11-27; zero3_nvme on a virtio disk far more; a CPU
keeps the factor its sessions were guessed with)."""
OFFLOAD_SETUP_S = {"cpu": 0.0, "cuda": 8.0}
"""Seconds offload adds to a GPU configuration's start: pinning its host memory (7-10 s on 2x H200);
a CPU run pins nothing."""
WINDOW_BUDGET_SHARE = {"steady": 0.25, "host_bound": 1.0}
"""The share of its time budget an adaptive window is guessed to take: a steady GPU step reaches
the precision after 10 to 15 steps (3-5 s of a 20 s budget for llama-1b), while ZeRO-3's and
offload's host-bound steps ran to the budget in every session on 1x H100 and 2x H200
(docs/results/2026-11-26-h100-pretrain-fresh-host-5, 2026-11-27-h200x2-side-by-side)."""


def runs_to_budget(spec: RunSpec) -> bool:
    """Whether a configuration's adaptive window is expected to end at its time budget rather than at
    its precision: ZeRO-3 and optimizer offload, whose steps wait on the host."""
    return spec.strategy == "zero3" or spec.offload != "none"


PRIOR_SHARE = 0.5
"""The weight, in shares of the plan's guessed seconds, that keeps the ratio learnt from other
strategies' configurations near 1 (module docstring)."""
_UNKNOWN_PARAMS = 100e6


def _params(spec: RunSpec) -> float:
    """The model's parameter count: the preset's, else estimated from its config's shapes."""
    try:
        preset = resolve_model(spec.model, spec.model_config)
    except SpecError:
        return _UNKNOWN_PARAMS
    return float(params_of(preset) or _UNKNOWN_PARAMS)


def _window_s(spec: RunSpec, step_s: float) -> float:
    """The measured window's guessed seconds: its steps, or for an adaptive window with a time budget
    its budget's share (no less than its minimum steps, no more than its cap). An epoch-based window
    (seq2seq) measures epochs while its mean is unknown, past its cap within the budget: its share."""
    share = spec.window_budget_s * WINDOW_BUDGET_SHARE["host_bound" if runs_to_budget(spec) else "steady"]
    if spec.workload == "seq2seq" and spec.window_budget_s > 0:
        return min(max(spec.max_epoch_steps * step_s, share), spec.window_budget_s)
    if spec.min_steps > 0 and spec.window_budget_s > 0:
        return min(spec.steps * step_s, max(spec.min_steps * step_s, share))
    return spec.steps * step_s


def start_kind(spec: RunSpec, seen: dict[int, int], lanes: int = 1) -> str:
    """How the configuration planned next starts its ranks, in the order the session runs them:
    the session's first (`session`), among the first LANES of its world size (`group`: each lane
    starts a group of ranks), or on ranks a configuration before it kept warm (`warm`). SEEN counts
    the configurations planned so far per world size; it is updated. (With --llmbench-isolate every
    configuration starts a group: the ETA then learns the difference from the first ones to finish.)"""
    count = seen.get(spec.world_size, 0)
    seen[spec.world_size] = count + 1
    if sum(seen.values()) == 1:
        return "session"
    return "group" if count < max(lanes, 1) else "warm"


def expected_seconds(spec: RunSpec, repeats: int = 1, start: str = "group") -> float:
    """A rough guess of one configuration's wall time, its ranks started as START says (start_kind);
    see the module's docstring."""
    device = spec.device if spec.device in START_S else "cpu"
    flops_per_rank = 6.0 * _params(spec) * spec.tokens_per_step / spec.world_size
    step_s = flops_per_rank / RANK_FLOPS[device] * OFFLOAD_FACTOR[device].get(spec.offload, 1.0)
    start_s = START_S[device][start] + (OFFLOAD_SETUP_S[device] if spec.offload != "none" else 0.0)
    return repeats * (start_s + (spec.warmup + spec.profile_steps) * step_s + _window_s(spec, step_s))


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
        """Measured over guessed seconds of the finished ones of the same group; else of all, drawn
        towards 1 by PRIOR_SHARE of the plan's guessed seconds."""
        for same_group in (True, False):
            pairs = [
                (wall, self.plan[n].expected_s)
                for n, wall in self.finished.items()
                if wall is not None and n in self.plan and (not same_group or self.plan[n].group == group)
            ]
            guessed = sum(g for _, g in pairs)
            if guessed > 0:
                prior = 0.0 if same_group else PRIOR_SHARE * sum(p.expected_s for p in self.plan.values())
                return (sum(w for w, _ in pairs) + prior) / (guessed + prior)
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
