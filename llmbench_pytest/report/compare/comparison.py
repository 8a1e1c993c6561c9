"""`llmbench compare A B ...`: the same configurations on different machines or runs, with prices.

As the encoder-decoder benchmark's compare_results.py: per configuration tokens/s, step time, peak
memory and the speed-up over the first input that ran it; with one price per input ($ per GPU-hour,
the encoder-decoder benchmark's `--cost 3.00 5.50`) the cost of a million tokens and of a thousand
samples (the LoRA fine-tuning guide's):

    $ per second of the job = price per GPU-hour x world size / 3600
    $ per 1M tokens        = $ per second / tokens per second x 1,000,000
    $ per 1K samples       = $ per second / samples per second x 1,000

No input is called faster or cheaper from noise. Whether two inputs' speeds differ is the speed
decision's (analysis/decision.py through ranking.py: sessions as the unit, against the spread
between sessions, the gate's own): the speed-up carries
that interval, "fastest" marks an input measurably faster than every other, and inputs the
measurements cannot tell from the fastest are each "tied fastest", with a line under the table
that gives the interval and, among the tied, the cheaper (its price) or the leaner one. A cost per
token is price x world size / tokens/s, so its interval is the speed's scaled by the prices: two
inputs at one price are tied on cost exactly when they are tied on speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tabulate import tabulate

from .. import fmt
from ..configs import strategy_rank
from ..ranking import Ranking, Speeds, and_list, methods, sources

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..records import Record, RecordKey
    from .inputs import Input


@dataclass(frozen=True)
class Row:
    key: RecordKey
    input: Input
    record: Record
    speedup: float | None
    """tokens/s over the reference input's (the first input that ran this configuration)."""
    is_ref: bool = False
    """This row is the reference the others' speed-up is measured against."""

    @property
    def dollars_per_sec(self) -> float | None:
        if self.input.price is None:
            return None
        return self.input.price * self.key.world_size / 3600

    @property
    def cost_per_1m_tokens(self) -> float | None:
        rate, t = self.dollars_per_sec, self.record.tokens_per_sec
        return rate / t * 1e6 if rate is not None and t else None

    @property
    def cost_per_1k_samples(self) -> float | None:
        rate, s = self.dollars_per_sec, self.record.samples_per_sec
        if s is None and self.record.tokens_per_sec and self.key.seq_len:
            s = self.record.tokens_per_sec / self.key.seq_len
        return rate / s * 1e3 if rate is not None and s else None


@dataclass
class Verdict:
    """What one configuration's inputs show: who is fastest (or tied for it), who is cheapest."""

    speed: Ranking[Row] | None
    """The finished inputs by tokens/s, each against the fastest; None with fewer than two."""
    cheapest: list[Row]
    """The cheapest per 1M tokens and the inputs tied with it on cost (an empty list without two
    priced inputs)."""
    speeds: Speeds[Row] | None = None

    @property
    def fastest(self) -> list[Row]:
        """The fastest, and every input the measurements cannot tell from it."""
        return self.speed.tied if self.speed is not None else []


def _cost_tied(speeds: Speeds[Row], cheap: Row, other: Row) -> bool:
    """Cost per token of `other` over `cheap` = (price_o / price_c) x (tokens_c / tokens_o): the
    speed comparison scaled by the prices, tied where its interval includes 1."""
    pc, po = cheap.input.price or 0.0, other.input.price or 0.0
    if pc == 0:
        return po == 0  # both free: the same cost, however fast
    return speeds.gap(other, cheap).times(po / pc).tied


def verdict(rows: Sequence[Row]) -> Verdict:
    """The speed ranking and the cheapest inputs of one configuration (ranking.py decides ties)."""
    ok = [r for r in rows if r.record.ok and r.record.step_time]
    if len(ok) < 2:
        return Verdict(None, [])
    speeds = Speeds(ok, lambda r: r.record)
    priced = [r for r in ok if r.cost_per_1m_tokens is not None]
    cheapest: list[Row] = []
    if len(priced) > 1:
        low = min(priced, key=lambda r: r.cost_per_1m_tokens or 0)
        cheapest = [low, *(r for r in priced if r is not low and _cost_tied(speeds, low, r))]
    return Verdict(speeds.ranking(), cheapest, speeds)


def _speedup_cell(r: Row, ref: Row | None, v: Verdict) -> str:
    """'ref', '1.60x (1.55-1.66)': the speed-up over the reference with its 95% interval."""
    if r.is_ref:
        return "ref"
    if ref is None or v.speeds is None or not all(x.record.ok and x.record.step_time for x in (r, ref)):
        return fmt.ratio(r.speedup)
    gap = v.speeds.gap(ref, r)
    if gap.low is None or gap.high is None:
        return fmt.ratio(gap.ratio)
    return f"{fmt.ratio(gap.ratio)} ({gap.low:.2f}-{gap.high:.2f})"


def _notes(r: Row, v: Verdict) -> list[str]:
    out = []
    fastest, cheapest = v.fastest, v.cheapest
    if any(r is x for x in fastest):
        # an untested gap is a tie (ranking.Gap.tied): no input is named fastest over it
        out.append("tied fastest" if len(fastest) > 1 else "fastest")
    if any(r is x for x in cheapest):
        out.append("cheapest" if len(cheapest) == 1 else "tied cheapest")
    if not r.record.ok:
        out.append(r.record.status)
    return out


def tie_line(key: RecordKey, v: Verdict) -> str | None:
    """Under the table, for a configuration whose fastest input is tied with others: the
    interval, and which of the tied is cheaper (by its price) or leaner, where one is."""
    rank = v.speed
    if rank is None or not rank.is_tie:
        return None
    tied, top = rank.tied, rank.top
    gaps = and_list(
        [
            f"{r.input.label} {fmt.ratio(rank.gap(r).ratio)} ({rank.gap(r).ratio_interval() or 'not tested'})"
            for r in tied[1:]
        ]
    )
    how = methods(rank.gap(r) for r in tied[1:])
    settle = rank.gap(tied[1]).settle_words()
    line = (
        f"{key.label()}: {rank.tie_phrase(lambda r: r.input.label)}: against {top.input.label}, {gaps} "
        f"(95% intervals; {how}): the difference is noise, not the inputs; {settle}."
    )
    cheap = [r for r in v.cheapest if any(r is t for t in tied)]
    if len(v.cheapest) == 1 and cheap:
        dearer = [r for r in tied if r is not cheap[0]]
        costs = and_list([fmt.money(r.cost_per_1m_tokens) for r in dearer])
        return line + (
            f" At a speed the measurements cannot tell apart, {cheap[0].input.label} is the cheaper: "
            f"{fmt.money(cheap[0].cost_per_1m_tokens)} against {costs} per 1M tokens."
        )
    mems = [r.record.peak_memory_gb for r in tied]
    if None not in mems and len(set(mems)) > 1:
        lean = min(tied, key=lambda r: r.record.peak_memory_gb or 0)
        gb = fmt.gb(lean.record.peak_memory_gb)
        return line + f" {lean.input.label} needs the least peak memory of them ({gb} GB)."
    return line


@dataclass
class Comparison:
    inputs: list[Input]
    rows: list[Row]
    _verdicts: dict[RecordKey, Verdict] | None = field(default=None, init=False, repr=False)

    @property
    def priced(self) -> bool:
        return any(i.price is not None for i in self.inputs)

    def verdicts(self) -> dict[RecordKey, Verdict]:
        """Per configuration: the fastest and cheapest inputs, ties included (computed once)."""
        if self._verdicts is None:
            self._verdicts = {key: verdict(rows) for key, rows in self.by_key().items()}
        return self._verdicts

    def _table_rows(self) -> tuple[list[str], list[list[str]]]:
        headers = ["configuration", "input", "hardware", "tokens/s", "step s", "peak GB", "speed-up"]
        if self.priced:
            headers += ["$/1M tokens", "$/1K samples"]
        headers.append("note")
        out: list[list[str]] = []
        verdicts = self.verdicts()
        for key, rows in self.by_key().items():
            v = verdicts[key]
            ref = next((r for r in rows if r.is_ref), None)
            for i, r in enumerate(rows):
                rec = r.record
                mem = fmt.gb(rec.peak_memory_gb) + (" RSS" if rec.memory_kind == "host RSS" else "")
                line = [
                    key.label() if i == 0 else "",
                    r.input.label,
                    rec.hardware,
                    fmt.tokens(rec.tokens_per_sec),
                    fmt.seconds(rec.step_time),
                    mem if rec.peak_memory_gb is not None else fmt.NA,
                    _speedup_cell(r, ref, v),
                ]
                if self.priced:
                    line += [fmt.money(r.cost_per_1m_tokens), fmt.money(r.cost_per_1k_samples)]
                line.append(", ".join(_notes(r, v)))
                out.append(line)
        return headers, out

    def by_key(self) -> dict[RecordKey, list[Row]]:
        out: dict[RecordKey, list[Row]] = {}
        for r in self.rows:
            out.setdefault(r.key, []).append(r)
        return out

    def _inputs_lines(self) -> list[str]:
        lines = []
        for i in self.inputs:
            price = f", ${i.price:.2f} per GPU-hour" if i.price is not None else ""
            note = f" [{i.records.note}]" if i.records.note else ""
            lines.append(f"{i.label}: {i.records.source} on {', '.join(i.records.hardware)}{price}{note}")
        return lines

    def _footer(self) -> list[str]:
        out = [
            "speed-up: tokens/s over the first input that ran the configuration (ref), with its 95% "
            "interval from the spread between sessions; fastest and cheapest mark an input the "
            "measurements tell apart from every other, tied fastest and tied cheapest those they cannot "
            "tell from the best."
        ]
        if any(v.speed and not all(g.tested for g in v.speed.gaps) for v in self.verdicts().values()):
            out.append(
                "untested: nothing measured the spread between sessions of an input (one session, and no "
                "spread measured for its strategy on its device): its lead may be noise; --sessions N with "
                "2 or more sessions an input measures it."
            )
        out += [line for key, v in self.verdicts().items() if (line := tie_line(key, v))]
        spreads = sources(g for v in self.verdicts().values() if v.speed for g in v.speed.gaps[1:])
        if spreads:
            out.append(f"spread between sessions from: {'; '.join(spreads)}.")
        if self.priced:
            out.append(
                "cost: $/GPU-hour x world size / 3600 / (tokens/s or samples/s); "
                "per 1M tokens and per 1K samples."
            )
        if any(r.record.device == "cpu" for r in self.rows):
            out.append(
                "CPU smoke rows show that the code ran; their speed and cost are not performance claims."
            )
        shared = [k for k, rows in self.by_key().items() if len({r.input.label for r in rows}) > 1]
        if len(self.inputs) > 1 and not shared:
            out.append("No configuration ran in more than one input: nothing is compared like for like.")
        return out

    def format(self) -> str:
        headers, rows = self._table_rows()
        table = tabulate(
            rows, headers=headers, tablefmt="simple", disable_numparse=True, colalign=fmt.colalign(headers)
        )
        return "\n".join([*self._inputs_lines(), "", table, "", *self._footer()])

    def markdown(self) -> str:
        headers, rows = self._table_rows()
        table = tabulate(
            rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=fmt.colalign(headers)
        )
        inputs = [f"- {line}" for line in self._inputs_lines()]
        return "\n".join(["# Comparison", "", *inputs, "", table, "", *self._footer(), ""])


def compare(inputs: Sequence[Input]) -> Comparison:
    """Rows for every configuration any input ran, grouped by configuration, inputs in order."""
    maps = [i.records.by_key() for i in inputs]
    keys = dict.fromkeys(k for m in maps for k in m)
    rows = []
    for key in sorted(
        keys, key=lambda k: (k.model, k.seq_len, k.dtype, k.world_size, strategy_rank(k.strategy))
    ):
        ref: float | None = None
        for i, m in zip(inputs, maps, strict=True):
            rec = m.get(key)
            if rec is None:
                continue
            t = rec.tokens_per_sec
            is_ref = ref is None and bool(t)
            if is_ref:
                ref = t
            rows.append(Row(key, i, rec, t / ref if t and ref else None, is_ref))
    return Comparison(list(inputs), rows)
