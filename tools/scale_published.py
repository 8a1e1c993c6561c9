"""The published multi-node runs that tools/scale_validation.py checks the scale model against beyond
one node (imported by it; no command of its own).

A published series (docs/results/2026-11-28-scale-published/published.json) is one model trained
with FSDP at one per-GPU batch on several GPU counts, with its tokens/s per GPU at each. The model
is given what a session would give it, from the published figures and hardware instead of a
measurement: a run at the series' smallest size whose step is the published one (tokens per GPU a
step over tokens/s per GPU), the model's parameters and layers, the framework's gather and
reduction dtypes, the link inside a node (a probe's sweep kept in docs/results, or one scaled to
the GPU's published all_reduce busbw) and the published NIC rate between nodes. It predicts the
step at each larger size; the efficiency is the smallest size's step over that one (weak scaling,
tokens/s per GPU at N over at N0), with its 90% interval.

What a published run does not give is named: no per-step times (no slowest-rank term; the
interval's host spread is the class median), no optimizer time (FSDP shards it: 1/N of a step's
optimizer, left out), and where the source does not state the network, the assumed one is named.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmbench_pytest.plan.interval import Calibration
from llmbench_pytest.plan.network import NIC_EFFICIENCY, Fabric
from llmbench_pytest.plan.scale import predict_config

POINT_GOAL = 0.05
"""The point's goal: within 5 points of efficiency of the published figure."""


@dataclass(frozen=True)
class Point:
    entry: dict[str, Any]
    n0: int
    n: int
    published: float
    """Published efficiency: tokens/s per GPU at n over at n0."""
    predicted: float
    low: float
    high: float

    @property
    def inside(self) -> bool:
        return self.low <= self.published <= self.high

    @property
    def within_goal(self) -> bool:
        return abs(self.predicted - self.published) <= POINT_GOAL


def sweep(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """The link inside a node for `name` (published.json's links): a kept sweep, or one scaled."""
    link = doc["links"][name]
    if "sweep" in link:
        return copy.deepcopy(link["sweep"])
    out = copy.deepcopy(doc["links"][link["scale_from"]]["sweep"])
    factor = float(link["busbw_gbps"]) / float(out["all_reduce"]["peak_busbw_gbps"])
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        for row in out[kind]["sizes"]:
            row["busbw_gbps"] *= factor
        out[kind]["peak_busbw_gbps"] *= factor
    out.pop("overlap", None)  # no share measured on that GPU: assumed, the interval spans none to whole
    return out


def base_run(entry: dict[str, Any], n0: int, tokens_per_gpu: float) -> dict[str, Any]:
    """What a session's run at n0 would record, from the published figures (module docstring)."""
    tokens_per_step = entry["micro_batch"] * entry["grad_accum"] * entry["seq_len"]
    return {
        "strategy": "fsdp",
        "offload": "none",
        "dtype": "bf16",
        "device": "cuda",
        "gpu_name": entry["gpu"],
        "world_size": n0,
        "params": entry["params"],
        "per_device_batch": entry["micro_batch"],
        "grad_accum": entry["grad_accum"],
        "seq_len": entry["seq_len"],
        "mean_step_time_sec": tokens_per_step / tokens_per_gpu,
        "tokens_per_sec": tokens_per_gpu * n0,
        "optimizer_step_sec": 0.0,
        "model_info": {"layers": entry["layers"], "hidden_size": entry["hidden"]},
        "strategy_config": {"gather_dtype": entry["gather_dtype"], "reduce_dtype": entry["reduce_dtype"]},
    }


def fabric(doc: dict[str, Any], entry: dict[str, Any]) -> Fabric:
    gbytes = entry["nic_gbit_per_gpu"] / 8 * NIC_EFFICIENCY
    name = f"{entry['nic_gbit_per_gpu']} Gbit/s a GPU"
    return Fabric(sweep(doc, entry["link"]), entry["gpus_per_node"], gbytes, network_name=name,
                  nic_efficiency=NIC_EFFICIENCY)  # fmt: skip


def points(doc: dict[str, Any], calibration: Calibration) -> list[Point]:
    """Every published point past its series' smallest size, predicted from that size alone."""
    out = []
    for entry in doc["entries"]:
        series = sorted((int(n), float(t)) for n, t in entry["series"])
        n0, t0 = series[0]
        sizes = [n for n, _ in series[1:]]
        scaled = predict_config(
            entry["id"], [base_run(entry, n0, t0)], sizes, fabric(doc, entry), calibration
        )
        by_n = {p.world_size: p for p in scaled.predictions}
        for n, t in series[1:]:
            p = by_n[n]
            step0 = by_n[n0].step_sec
            assert p.step_low is not None and p.step_high is not None
            eff = step0 / p.step_sec
            out.append(Point(entry, n0, n, t / t0, eff, step0 / p.step_high, step0 / p.step_low))
    return out


def summary(found: list[Point]) -> dict[str, Any]:
    widths = sorted(p.high - p.low for p in found)
    return {
        "points": len(found),
        "inside": sum(p.inside for p in found),
        "within_5pt": sum(p.within_goal for p in found),
        "median_width_pt": widths[len(widths) // 2] * 100 if widths else math.nan,
    }


def table(found: list[Point]) -> list[str]:
    lines = [
        "| source | model | GPUs | network | tokens a GPU step | published tokens/s/GPU (N0 -> N) "
        "| published eff | predicted eff | 90% interval | inside | within 5 pt |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in found:
        e = p.entry
        series = dict((int(n), t) for n, t in e["series"])
        tokens = e["micro_batch"] * e["grad_accum"] * e["seq_len"]
        stated = "" if e["network_stated"] else " (not stated; assumed)"
        lines.append(
            f"| [{e['id']}]({e['source']}) | {e['model']} | {p.n0} -> {p.n} {e['gpu']} | "
            f"{e['nic_gbit_per_gpu']} Gbit/s a GPU{stated} | {tokens:,} | "
            f"{series[p.n0]:,} -> {series[p.n]:,} | "
            f"{p.published:.1%} | {p.predicted:.1%} | {p.low:.1%}-{p.high:.1%} | "
            f"{'yes' if p.inside else '**no**'} | {'yes' if p.within_goal else '**no**'} |"
        )
    return lines


def load(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
