"""`llmbench compare A B ...`: the same configurations on different machines or runs, with prices.

As the encoder-decoder benchmark's compare_results.py: per configuration tokens/s, step time, peak
memory and the speed-up over the first input that ran it; with one price per input ($ per GPU-hour,
the encoder-decoder benchmark's `--cost 3.00 5.50`) the cost of a million tokens and of a thousand
samples (the LoRA fine-tuning guide's):

    $ per second of the job = price per GPU-hour x world size / 3600
    $ per 1M tokens        = $ per second / tokens per second x 1,000,000
    $ per 1K samples       = $ per second / samples per second x 1,000
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tabulate import tabulate

from . import fmt
from .collect import ReportError
from .configs import strategy_rank
from .records import Record, RecordKey, RecordSet, load_records
from .table import colalign

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True)
class Input:
    """One side of the comparison."""

    label: str
    """Short name shown in the tables (the folder or file name)."""
    records: RecordSet
    price: float | None = None
    """$ per GPU-hour, or None without --cost."""


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


def parse_prices(raw: Sequence[str] | None, labels: Sequence[str]) -> list[float | None]:
    """One $/GPU-hour per input, in order; raises ReportError on a count mismatch or a bad number."""
    if not raw:
        return [None] * len(labels)
    if len(raw) != len(labels):
        raise ReportError(
            f"--cost: {len(raw)} price(s) for {len(labels)} input(s) ({', '.join(labels)}); "
            "give one $ per GPU-hour per input, in the same order"
        )
    prices: list[float | None] = []
    for text, label in zip(raw, labels, strict=True):
        try:
            value = float(text.lstrip("$"))
        except ValueError:
            raise ReportError(f"--cost: {text!r} for {label} is not a number; write e.g. 3.00") from None
        if not math.isfinite(value) or value < 0:
            raise ReportError(f"--cost: {text!r} for {label} must be a price of 0 or more ($ per GPU-hour)")
        prices.append(value)
    return prices


def _labels(paths: Sequence[Path]) -> list[str]:
    names = [p.name or str(p) for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]  # same folder name on two machines: the full path tells them apart


def load_inputs(paths: Sequence[Path | str], prices: Sequence[str] | None = None) -> list[Input]:
    ps = [Path(p) for p in paths]
    labels = _labels(ps)
    costs = parse_prices(prices, labels)
    return [Input(label, load_records(p), cost) for p, label, cost in zip(ps, labels, costs, strict=True)]


@dataclass
class Comparison:
    inputs: list[Input]
    rows: list[Row]

    @property
    def priced(self) -> bool:
        return any(i.price is not None for i in self.inputs)

    def _table_rows(self) -> tuple[list[str], list[list[str]]]:
        headers = ["configuration", "input", "hardware", "tokens/s", "step s", "peak GB", "speed-up"]
        if self.priced:
            headers += ["$/1M tokens", "$/1K samples"]
        headers.append("note")
        out: list[list[str]] = []
        last: RecordKey | None = None
        for key, rows in self.by_key().items():
            fastest = max(rows, key=lambda r: r.record.tokens_per_sec or 0)
            priced = [r for r in rows if r.cost_per_1m_tokens is not None]
            cheapest = min(priced, key=lambda r: r.cost_per_1m_tokens or 0) if priced else None
            for r in rows:
                rec = r.record
                notes = []
                if len(rows) > 1 and r is fastest and rec.ok:
                    notes.append("fastest")
                if len(priced) > 1 and r is cheapest:
                    notes.append("cheapest")
                if not rec.ok:
                    notes.append(rec.status)
                mem = fmt.gb(rec.peak_memory_gb) + (" RSS" if rec.memory_kind == "host RSS" else "")
                line = [
                    key.label() if key != last else "",
                    r.input.label,
                    rec.hardware,
                    fmt.tokens(rec.tokens_per_sec),
                    fmt.seconds(rec.step_time),
                    mem if rec.peak_memory_gb is not None else fmt.NA,
                    "ref" if r.is_ref else fmt.ratio(r.speedup),
                ]
                if self.priced:
                    line += [fmt.money(r.cost_per_1m_tokens), fmt.money(r.cost_per_1k_samples)]
                line.append(", ".join(notes))
                out.append(line)
                last = key
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
        out = ["speed-up: tokens/s over the first input that ran the configuration (ref)."]
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
            rows, headers=headers, tablefmt="simple", disable_numparse=True, colalign=colalign(headers)
        )
        return "\n".join([*self._inputs_lines(), "", table, "", *self._footer()])

    def markdown(self) -> str:
        headers, rows = self._table_rows()
        table = tabulate(
            rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=colalign(headers)
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
