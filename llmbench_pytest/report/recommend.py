"""The recommendation: which configuration to train with, and the patterns the benchmark card names.

Standard library only. Runs are compared only with runs of the same scenario (model, shapes,
precision, hardware, world size): a ZeRO-3 run on 8 GPUs is not "faster" than DDP on one. Every
sentence carries its numbers, so a reader can check the claim against the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import fmt
from .configs import Config, ConfigKey, scenario_title

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .scaling import Scaling


@dataclass(frozen=True, kw_only=True)
class PatternRules:
    """Thresholds for the benchmark card's result patterns; each compares runs of one scenario."""

    near_fastest: float = 0.10
    """Within this fraction of the scenario's best tokens/s counts as fast (pattern 1); within this
    fraction of a configuration's own tokens/s, another is nearly as fast."""
    hungry: float = 0.20
    """Peak memory at least this fraction above that of a configuration nearly as fast is
    memory-hungry (pattern 1)."""
    frugal: float = 0.20
    """Peak memory at least this fraction below the scenario's highest is memory-efficient (2, 3)."""
    good_speed: float = 0.75
    """At least this fraction of the scenario's best tokens/s is good speed (pattern 2)."""
    poor_scaling: float = 0.60
    """Scaling efficiency below this is poor scaling (pattern 4). The benchmark card calls < 30% at
    4 GPUs 'investigate' under its 50%-at-2-GPUs convention: about 60% in this project's terms."""


PATTERNS = {
    "fast but memory-hungry": "the leaner one costs little speed: prefer it when memory is tight",
    "memory-efficient with good speed": "the choice when memory is tight or the model is larger",
    "highest throughput, medium memory": "the all-round choice: fastest without the largest footprint",
    "poor scaling": "communication or offload overhead dominates; check the interconnect, or use fewer GPUs",
}


@dataclass(frozen=True)
class Finding:
    """One configuration showing one of the benchmark card's patterns."""

    pattern: str
    config: Config
    evidence: str

    def line(self) -> str:
        return f"**{self.pattern}**: {self.config.label()}: {self.evidence} ({PATTERNS[self.pattern]})"


@dataclass
class Recommendation:
    """What to train with in one scenario, and why."""

    key: ConfigKey
    """Any configuration key of the scenario (the strategy part is ignored)."""
    configs: list[Config]
    fastest: Config | None = None
    frugal: Config | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def title(self) -> str:
        return scenario_title(self.key)

    @property
    def is_cpu(self) -> bool:
        return self.key.hardware == "CPU"

    @property
    def not_fitting(self) -> list[Config]:
        """Ran out of memory, or went over the memory limit, in some run."""
        return [c for c in self.configs if not c.fits and _out_of_memory(c)]

    @property
    def not_finished(self) -> list[Config]:
        """No run finished, and none ran out of memory: an error, an interruption, a run still in
        progress or one whose session was killed (unfinished). Not a verdict on memory."""
        return [c for c in self.configs if not c.fits and not _out_of_memory(c)]

    def sentences(self) -> list[str]:
        out: list[str] = []
        if self.is_cpu:
            out.append(
                "CPU smoke: this ranking shows which code paths ran, not which strategy is faster on a GPU."
            )
        f, m = self.fastest, self.frugal
        if f is None and self.not_fitting:
            out.append("No configuration finished within the memory limit, so none can be recommended.")
        elif f is None:
            out.append("No configuration finished, so none can be recommended.")
        else:
            mem = (
                f"{fmt.gb(f.memory_gb)} GB peak {f.memory_kind}" if f.memory_gb is not None else "memory n/a"
            )
            out.append(
                f"**{f.strategy}** is the fastest that fits: {fmt.tokens(f.tokens_per_sec)} tokens/s "
                f"(step {fmt.seconds(f.step_time)} s), {mem}."
            )
            if len([c for c in self.configs if c.fits]) == 1:
                out.append("It is the only configuration here that fits; nothing to choose between.")
            elif m is None:
                out.append("Peak memory was not measured, so the most memory-frugal one is unknown.")
            elif m is f:
                out.append("It also needs the least memory of the configurations that fit.")
            else:
                assert m.memory_gb is not None and f.memory_gb and m.tokens_per_sec and f.tokens_per_sec
                saving = 1 - m.memory_gb / f.memory_gb
                cost = 1 - m.tokens_per_sec / f.tokens_per_sec
                mem = f"{fmt.gb(m.memory_gb)} GB peak {m.memory_kind}"
                out.append(
                    f"**{m.strategy}** needs the least memory: {mem}, "
                    f"{fmt.pct(saving, 0)} less than {f.strategy}, for {fmt.pct(cost, 0)} less throughput "
                    f"({fmt.tokens(m.tokens_per_sec)} tokens/s)."
                )
        if self.not_fitting:
            out.append("Did not fit: " + ", ".join(_why_not(c) for c in self.not_fitting) + ".")
        if self.not_finished:
            out.append("Did not finish: " + ", ".join(_why_not(c) for c in self.not_finished) + ".")
        return out


def _out_of_memory(c: Config) -> bool:
    return any(r.status == "oom" or r.memory_check_failed for r in c.runs)


def _why_not(c: Config) -> str:
    ooms = sum(r.status == "oom" for r in c.runs)
    if c.ok and ooms:
        return f"{c.strategy} (out of memory in {ooms} of {len(c.runs)} runs)"
    if c.ok:
        checks = [x for r in c.runs for x in r.failed_checks if x.get("name") == "peak_memory"]
        measured, limit = (checks[0].get("measured"), checks[0].get("limit")) if checks else (None, None)
        if measured is not None and limit is not None:
            return f"{c.strategy} (over the memory limit: {measured:.1f} > {limit:.1f} GB)"
        return f"{c.strategy} (over the memory limit)"
    notes = [r.running_note for r in c.runs if r.running_note]
    return f"{c.strategy} ({notes[-1] if notes else c.status})"


def _leaner_alternative(c: Config, others: list[Config], rules: PatternRules) -> Config | None:
    """The leanest configuration nearly as fast as `c` (or faster) that needs much less memory:
    what makes `c` memory-hungry is an alternative a user could pick at little cost in speed."""
    t, mem = c.tokens_per_sec or 0, c.memory_gb or 0
    alternatives = [
        o
        for o in others
        if o is not c
        and (o.tokens_per_sec or 0) >= (1 - rules.near_fastest) * t
        and mem >= (1 + rules.hungry) * (o.memory_gb or 0)
    ]
    return min(alternatives, key=lambda o: o.memory_gb or 0, default=None)


def _patterns(ok: list[Config], fastest: Config, rules: PatternRules) -> list[Finding]:
    """The benchmark card's patterns 1-3 among the finished configurations of one scenario. Memory
    is weighed against what a configuration of similar speed needs, never against one much slower:
    an offload run at a third of the speed makes nothing 'memory-hungry'."""
    with_mem = [c for c in ok if c.memory_gb and c.tokens_per_sec]
    if len(with_mem) < 2:
        return []
    best = max(c.tokens_per_sec or 0 for c in with_mem)
    leanest = min(with_mem, key=lambda c: c.memory_gb or 0)
    hungriest = max(with_mem, key=lambda c: c.memory_gb or 0)
    hi = hungriest.memory_gb or 0
    found: list[Finding] = []
    for c in with_mem:
        t, mem = c.tokens_per_sec or 0, c.memory_gb or 0
        speed = f"{fmt.tokens(t)} tokens/s ({fmt.pct(t / best, 0)} of the best)"
        leaner = _leaner_alternative(c, with_mem, rules) if t >= (1 - rules.near_fastest) * best else None
        if c is fastest and c is not leanest and mem <= (1 - rules.frugal) * hi:
            found.append(
                Finding(
                    "highest throughput, medium memory",
                    c,
                    f"{fmt.tokens(t)} tokens/s, {fmt.gb(mem)} GB: {fmt.pct(1 - mem / hi, 0)} below "
                    f"{hungriest.strategy}'s {fmt.gb(hi)} GB",
                )
            )
        elif leaner is not None:
            lt, lm = leaner.tokens_per_sec or 0, leaner.memory_gb or 0
            found.append(
                Finding(
                    "fast but memory-hungry",
                    c,
                    f"{speed}, {fmt.gb(mem)} GB: {fmt.pct(mem / lm - 1, 0)} more than {leaner.strategy}, "
                    f"which is {'faster' if lt > t else 'nearly as fast'} ({fmt.tokens(lt)} tokens/s) "
                    f"in {fmt.gb(lm)} GB",
                )
            )
        elif c is not fastest and t >= rules.good_speed * best and mem <= (1 - rules.frugal) * hi:
            found.append(
                Finding(
                    "memory-efficient with good speed",
                    c,
                    f"{speed}, {fmt.gb(mem)} GB: {fmt.pct(1 - mem / hi, 0)} below "
                    f"{hungriest.strategy}'s {fmt.gb(hi)} GB",
                )
            )
    return found


def _poor_scaling(c: Config, s: Scaling, rules: PatternRules) -> Finding | None:
    # on a CPU the ranks share the host's cores, so scaling says nothing of an interconnect: the
    # scaling check gives no verdict there, and the advice to check one would send the reader astray
    if c.is_cpu or c.world_size <= s.baseline_ws or s.efficiency >= rules.poor_scaling:
        return None
    speedup = (c.tokens_per_sec or 0) / (s.baseline.tokens_per_sec or 1)
    return Finding(
        "poor scaling",
        c,
        f"{fmt.pct(s.efficiency, 0)} efficiency ({s.describe()}): {c.world_size} ranks deliver "
        f"{speedup:.2f}x the throughput of {s.baseline_ws}, ideal {c.world_size / s.baseline_ws:g}x",
    )


def recommend(
    configs: Sequence[Config], scaling: dict[ConfigKey, Scaling], rules: PatternRules | None = None
) -> list[Recommendation]:
    """One recommendation per scenario, in the configurations' order."""
    rules = rules or PatternRules()
    scenarios: dict[tuple[object, ...], Recommendation] = {}
    for c in configs:
        rec = scenarios.get(c.key.scenario)
        if rec is None:
            rec = scenarios[c.key.scenario] = Recommendation(c.key, [])
        rec.configs.append(c)
    for rec in scenarios.values():
        fitting = [c for c in rec.configs if c.fits and c.tokens_per_sec]
        if fitting:
            rec.fastest = max(fitting, key=lambda c: c.tokens_per_sec or 0)
            with_mem = [c for c in fitting if c.memory_gb is not None]
            if with_mem:
                # among equally lean ones, the faster is the better pick
                rec.frugal = min(with_mem, key=lambda c: (c.memory_gb, -(c.tokens_per_sec or 0)))
            rec.findings = _patterns([c for c in rec.configs if c.ok], rec.fastest, rules)
        for c in rec.configs:
            s = scaling.get(c.key)
            finding = _poor_scaling(c, s, rules) if s else None
            if finding:
                rec.findings.append(finding)
    return list(scenarios.values())
