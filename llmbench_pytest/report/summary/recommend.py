"""The recommendation: which configuration to train with, and the patterns the benchmark card names.

Standard library at import (the tie tests load numpy and scipy when they run). Runs are compared
only with runs of the same scenario (model, shapes, precision, hardware, world size): a ZeRO-3 run
on 8 GPUs is not "faster" than DDP on one. Every sentence carries its numbers, so a reader can
check the claim against the table.

No winner is named from noise. Whether one configuration is faster than another is the speed
decision's (analysis/decision.py, through ranking.py): the spread between sessions of each
strategy, not the steps of one run. Where the fastest and others are tied, the sentence says so
with their intervals and the sessions a side that would tell them apart, and the recommendation chooses
among them on peak memory (lower is better: within one scenario every strategy runs on the same
hardware at the same price, so the cost per token is as tied as the speed), and says so:
"fsdp_grad_op, fsdp and zero2 are tied on speed (within their +-8.0%, +-8.6% and +-7.9%
intervals) ...; zero2 is chosen for its lower peak memory: ...". A difference outside the
uncertainty is named plainly, with its interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import fmt
from ..configs import Config, ConfigKey, scenario_title
from ..ranking import Ranking, Speeds, and_list, methods, record_of, sources

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..scaling import Scaling


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
    """The configuration recommended for speed: the fastest that fits, or, where others that fit
    are tied with the fastest on speed (ranking.py), the one of those with the lowest peak memory."""
    frugal: Config | None = None
    findings: list[Finding] = field(default_factory=list)
    speed: Ranking[Config] | None = None
    """The configurations that fit, by tokens/s, each against the fastest; `speed.tied` are those
    the measurements cannot tell from it (the fastest included)."""
    speeds: Speeds[Config] | None = None
    """Speed comparisons between any two finished configurations of the scenario."""

    @property
    def title(self) -> str:
        return scenario_title(self.key)

    @property
    def is_cpu(self) -> bool:
        return self.key.hardware == "CPU"

    @property
    def tied(self) -> list[Config]:
        """The configurations tied for the fastest (the recommended one among them); [] without a
        tie."""
        return self.speed.tied if self.speed is not None and self.speed.is_tie else []

    @property
    def chosen_for(self) -> str:
        """Why the recommended configuration was chosen among those tied for the fastest: 'lower
        peak memory', or 'highest point estimate' where memory did not decide (not measured for all,
        or the same); '' without a tie."""
        f, tied = self.fastest, self.tied
        if f is None or not tied:
            return ""
        if f.memory_gb is None or any(c.memory_gb is None for c in tied):
            return "highest point estimate"
        more = any((c.memory_gb or 0) > f.memory_gb for c in tied)
        return "lower peak memory" if more else "highest point estimate"

    @property
    def not_fitting(self) -> list[Config]:
        """Ran out of memory, or went over the memory limit, in some run."""
        return [c for c in self.configs if not c.fits and _out_of_memory(c)]

    @property
    def not_finished(self) -> list[Config]:
        """No run finished, and none ran out of memory: an error, an interruption, a run still in
        progress or one whose session was killed (unfinished). Not a verdict on memory."""
        return [c for c in self.configs if not c.fits and not _out_of_memory(c)]

    def spread_sources(self) -> list[str]:
        """Where the spreads between sessions behind the speed sentences came from, each once."""
        rank = self.speed
        return sources(rank.gaps[1:]) if rank is not None else []

    def sentences(self) -> list[str]:
        out: list[str] = []
        if self.is_cpu:
            out.append(
                "CPU smoke: this ranking shows which code paths ran, not which strategy is faster on a GPU."
            )
        f = self.fastest
        if f is None and self.not_fitting:
            out.append("No configuration finished within the memory limit, so none can be recommended.")
        elif f is None:
            out.append("No configuration finished, so none can be recommended.")
        else:
            out += self.speed_sentences()
            out += self._memory_sentences(f)
        if self.not_fitting:
            out.append("Did not fit: " + ", ".join(_why_not(c) for c in self.not_fitting) + ".")
        if self.not_finished:
            out.append("Did not finish: " + ", ".join(_why_not(c) for c in self.not_finished) + ".")
        return out

    def speed_sentences(self, bold: Callable[[str], str] = lambda s: f"**{s}**") -> list[str]:
        """Which configuration is the fastest that fits, or which are tied for it and which of them
        is chosen; then the next one the fastest is measurably faster than, with the interval."""
        f, rank = self.fastest, self.speed
        assert f is not None
        if rank is None or not rank.is_tie:
            mem = (
                f"{fmt.gb(f.memory_gb)} GB peak {f.memory_kind}" if f.memory_gb is not None else "memory n/a"
            )
            out = [
                f"{bold(f.strategy)} is the fastest that fits: {fmt.tokens(f.tokens_per_sec)} tokens/s "
                f"(step {fmt.seconds(f.step_time)} s), {mem}."
            ]
        else:
            out = [_tie_sentence(rank, bold), _pick_sentence(f, rank.tied, bold)]
        after = rank.first_untied() if rank is not None else None
        if rank is not None and after is not None:
            out.append(_next_sentence(rank, after))
        return out

    def _memory_sentences(self, f: Config) -> list[str]:
        m = self.frugal
        if len([c for c in self.configs if c.fits]) == 1:
            return ["It is the only configuration here that fits; nothing to choose between."]
        if m is None:
            return ["Peak memory was not measured, so the most memory-frugal one is unknown."]
        if m is f:
            return ["It also needs the least memory of the configurations that fit."]
        assert m.memory_gb is not None and f.memory_gb and m.tokens_per_sec and f.tokens_per_sec
        saving = 1 - m.memory_gb / f.memory_gb
        gap = self.speeds.gap(f, m) if self.speeds is not None else None
        if gap is not None and gap.tied:
            # a loss of throughput inside the noise is not a cost to quote
            cost = f"at a throughput the measurements cannot tell from {f.strategy}'s ({gap.change()})"
        else:
            cost = f"for {fmt.pct(1 - m.tokens_per_sec / f.tokens_per_sec, 0)} less throughput"
        mem = f"{fmt.gb(m.memory_gb)} GB peak {m.memory_kind}"
        return [
            f"**{m.strategy}** needs the least memory: {mem}, {fmt.pct(saving, 0)} less than {f.strategy}, "
            f"{cost} ({fmt.tokens(m.tokens_per_sec)} tokens/s)."
        ]


def _tie_sentence(rank: Ranking[Config], bold: Callable[[str], str]) -> str:
    """'a, b and c are tied on speed (within their +-x% intervals between sessions): 3,025, 2,950
    and 2,909 tokens/s; against a, b -2.5% (95% interval ...) and c ... (method); 6 sessions a side
    would tell a and b apart if the difference held.'"""
    tied, top = rank.tied, rank.top
    phrase = rank.tie_phrase(lambda c: bold(c.strategy))
    rates = and_list([fmt.tokens(c.tokens_per_sec) for c in tied])
    gaps = and_list([f"{c.strategy} {rank.gap(c).change()}" for c in tied[1:]])
    closest = tied[1]
    settle = (
        rank.gap(closest).settle_words().replace("them apart", f"{top.strategy} and {closest.strategy} apart")
    )
    return (
        f"{phrase}: {rates} tokens/s; against {top.strategy}, {gaps} ({methods(map(rank.gap, tied[1:]))}); "
        f"{settle}."
    )


def _pick_sentence(f: Config, tied: Sequence[Config], bold: Callable[[str], str]) -> str:
    """Why `f` is the one named among those tied for the fastest: its lower peak memory, or, where
    that does not decide, the highest point estimate."""
    others = [c for c in tied if c is not f]
    if f.memory_gb is None or any(c.memory_gb is None for c in others):
        return (
            f"{bold(f.strategy)} is named as the highest point estimate: peak memory was not measured "
            "for all of them."
        )
    more = [c for c in others if (c.memory_gb or 0) > f.memory_gb]
    if not more:
        return (
            f"{bold(f.strategy)} is named as the highest point estimate: they need the same peak memory "
            f"({fmt.gb(f.memory_gb)} GB {f.memory_kind})."
        )
    against = and_list([f"{fmt.gb(c.memory_gb)} GB ({c.strategy})" for c in more])
    same = [c.strategy for c in others if (c.memory_gb or 0) <= f.memory_gb]
    tail = f"; {and_list(same)} need as little, and {f.strategy} is the faster point estimate" if same else ""
    return (
        f"{bold(f.strategy)} is chosen for its lower peak memory: {fmt.gb(f.memory_gb)} GB peak "
        f"{f.memory_kind} against {against}{tail}."
    )


def _next_sentence(rank: Ranking[Config], c: Config) -> str:
    """The fastest configuration the decision tells apart from the fastest, named plainly with its
    interval."""
    gap, top = rank.gap(c), rank.top
    head = (
        f"The next, {c.strategy}, is {fmt.pct(1 - gap.ratio)} slower than {top.strategy}: "
        f"{fmt.tokens(c.tokens_per_sec)} tokens/s"
    )
    low, high = fmt.signed_pct((gap.low or 0) - 1), fmt.signed_pct((gap.high or 0) - 1)
    return f"{head}, 95% interval {low} .. {high}, outside the noise between sessions ({gap.method})."


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


def _patterns(ok: list[Config], rec: Recommendation, rules: PatternRules) -> list[Finding]:
    """The benchmark card's patterns 1-3 among the finished configurations of one scenario. Memory
    is weighed against what a configuration of similar speed needs, never against one much slower:
    an offload run at a third of the speed makes nothing 'memory-hungry'. Speeds the measurements
    cannot tell apart (ranking.py) are called tied, never 'faster'; 'the highest throughput' is the
    recommended configuration's, and shared where it is tied."""
    fastest, speeds = rec.fastest, rec.speeds
    with_mem = [c for c in ok if c.memory_gb and c.tokens_per_sec]
    if len(with_mem) < 2 or fastest is None:
        return []
    top = max(with_mem, key=lambda c: c.tokens_per_sec or 0)
    best = top.tokens_per_sec or 0
    leanest = min(with_mem, key=lambda c: c.memory_gb or 0)
    hungriest = max(with_mem, key=lambda c: c.memory_gb or 0)
    hi = hungriest.memory_gb or 0
    below = f"below {hungriest.strategy}'s {fmt.gb(hi)} GB"
    found: list[Finding] = []
    for c in with_mem:
        t, mem = c.tokens_per_sec or 0, c.memory_gb or 0
        tie = speeds is not None and c is not top and speeds.gap(top, c).tied
        speed = f"{fmt.tokens(t)} tokens/s ({fmt.pct(t / best, 0)} of the best{', a tie' if tie else ''})"
        leaner = _leaner_alternative(c, with_mem, rules) if t >= (1 - rules.near_fastest) * best else None
        if c is fastest and c is not leanest and mem <= (1 - rules.frugal) * hi:
            shared = [o.strategy for o in rec.tied if o is not c]
            head = f"tied for the highest with {and_list(shared)}: " if shared else ""
            evidence = f"{head}{fmt.tokens(t)} tokens/s, {fmt.gb(mem)} GB: {fmt.pct(1 - mem / hi, 0)} {below}"
            found.append(Finding("highest throughput, medium memory", c, evidence))
        elif leaner is not None:
            found.append(Finding("fast but memory-hungry", c, _hungry_evidence(c, leaner, speed, speeds)))
        elif c is not fastest and t >= rules.good_speed * best and mem <= (1 - rules.frugal) * hi:
            evidence = f"{speed}, {fmt.gb(mem)} GB: {fmt.pct(1 - mem / hi, 0)} {below}"
            found.append(Finding("memory-efficient with good speed", c, evidence))
    return found


def _hungry_evidence(c: Config, leaner: Config, speed: str, speeds: Speeds[Config] | None) -> str:
    t, mem = c.tokens_per_sec or 0, c.memory_gb or 0
    lt, lm = leaner.tokens_per_sec or 0, leaner.memory_gb or 0
    if speeds is not None and speeds.gap(c, leaner).tied:
        how = "as fast within the measurement's noise"
    else:
        how = "faster" if lt > t else "nearly as fast"
    return (
        f"{speed}, {fmt.gb(mem)} GB: {fmt.pct(mem / lm - 1, 0)} more than {leaner.strategy}, "
        f"which is {how} ({fmt.tokens(lt)} tokens/s) in {fmt.gb(lm)} GB"
    )


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


def _lean_first(c: Config) -> tuple[float, float]:
    # among equally lean ones, the faster is the better pick
    return (c.memory_gb or 0.0, -(c.tokens_per_sec or 0))


def _choose(rec: Recommendation, fitting: list[Config]) -> None:
    """The fastest that fits, or among those tied for it the leanest; and the leanest overall."""
    rec.speeds = Speeds([c for c in rec.configs if c.ok and c.tokens_per_sec], record_of)
    rec.speed = rec.speeds.ranking(fitting)
    tied = rec.speed.tied
    if len(tied) > 1 and all(c.memory_gb is not None for c in tied):
        rec.fastest = min(tied, key=_lean_first)
    else:
        rec.fastest = rec.speed.top  # one fastest, or memory unknown: the highest point estimate
    with_mem = [c for c in fitting if c.memory_gb is not None]
    if with_mem:
        rec.frugal = min(with_mem, key=_lean_first)


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
            _choose(rec, fitting)
            rec.findings = _patterns([c for c in rec.configs if c.ok and c.tokens_per_sec], rec, rules)
        for c in rec.configs:
            s = scaling.get(c.key)
            finding = _poor_scaling(c, s, rules) if s else None
            if finding:
                rec.findings.append(finding)
    return list(scenarios.values())
