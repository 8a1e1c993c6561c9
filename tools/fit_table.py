"""Per run: the peak measured against the peak predicted, `llmbench plan`'s fit verdict against what
happened, and every failed check.

    python3 tools/fit_table.py RESULTS_DIR [RESULTS_DIR ...] [--out table.md] [--json table.json]
        [--nvml-total-mib 143771] [--device-gb 150.11]

For every result.json under the folders: the run's configuration, its status, the peak allocated
it measured and the one predicted before it ran (the rank's record; predicted again here, as
`llmbench plan` would, where the run recorded none: an out-of-memory run can end before it
does), the verdict `llmbench plan` gives for it on its GPU (analysis/fit.py, with the GPU's memory
as CUDA reported it to the run, else --device-gb) against whether it ran, and the checks that
failed. With --nvml-total-mib (nvidia-smi's memory.total) each run's memory held outside the
caching allocator is estimated as NVML's largest used memory less the peak reserved and less what
NVML counts beyond CUDA's total; the fit verdict's OUTSIDE_ALLOCATOR_GB is that figure's
largest. Runs near their GPU's limit also give the allocator's retries and reserved over
allocated (FRAGMENTATION). Writes only the files named (stdout otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from llmbench_pytest.analysis import fit, peak_model
from llmbench_pytest.plan.validate import spec_of

HEALTHY = ("ok",)
"""Statuses of a run that trained: its failed checks count against the checks."""


def _device_gb(result: dict[str, Any], fallback: float | None) -> float | None:
    totals = [r.get("device_total_gb") for r in result.get("per_rank") or [] if r.get("device_total_gb")]
    return min(totals) if totals else fallback


def _predicted(result: dict[str, Any]) -> tuple[float | None, str]:
    """(predicted peak allocated, where it came from): the run's record, else predicted here."""
    if result.get("peak_predicted_gb") is not None:
        return float(result["peak_predicted_gb"]), "recorded"
    try:
        from llmbench_pytest.plan.predict import predict_spec

        ran = (result.get("strategy_config") or {}).get("deepspeed_config") or None
        prediction = predict_spec(spec_of(result), ds_config=ran)
    except Exception as exc:  # a configuration the trace cannot follow, a result without its RunSpec
        return None, f"not predicted: {type(exc).__name__}: {exc}"[:120]
    return prediction.allocated_gb, "predicted here"


def _outside_allocator(result: dict[str, Any], nvml_total_mib: float | None) -> float | None:
    """GB a rank held outside the caching allocator, the largest rank's (module docstring)."""
    if not nvml_total_mib:
        return None
    out = []
    for r in result.get("per_rank") or []:
        used = (
            (r.get("gpu_monitor") or {}).get("memory_used_gb_max")
            if isinstance(r.get("gpu_monitor"), dict)
            else None
        )
        if used and r.get("peak_reserved_gb") and r.get("device_total_gb"):
            out.append(used - r["peak_reserved_gb"] - (nvml_total_mib * 2**20 / 1e9 - r["device_total_gb"]))
    return max(out) if out else None


def row(path: Path, result: dict[str, Any], device_fallback: float | None, nvml_mib: float | None) -> dict:
    """One run's line of the table."""
    config = (result.get("config") or {}).get("run") or {}
    predicted, source = _predicted(result)
    device = _device_gb(result, device_fallback)
    on_gpu = result.get("device") == "cuda"
    verdict = fit.fits(predicted, device) if (on_gpu and predicted is not None and device) else None
    close = fit.close(predicted, device) if verdict is not None else None
    status = result.get("status")
    ran = {"ok": True, "oom": False}.get(str(status))
    measured = result.get("peak_vram_gb")
    settings = (result.get("strategy_config") or {}).get("settings") or {}
    retries = sum(int(r.get("alloc_retries") or 0) for r in result.get("per_rank") or [])
    return {
        "path": str(path.parent),
        "model": result.get("model") or config.get("model"),
        "strategy": result.get("strategy") or config.get("strategy"),
        "world_size": result.get("world_size") or config.get("world_size"),
        "batch": result.get("per_device_batch") or config.get("per_device_batch"),
        "seq_len": result.get("seq_len") or config.get("seq_len"),
        "settings": {k: v.get("value") for k, v in settings.items() if v.get("from") != "default"},
        "status": status,
        "measured_gb": measured,
        "reserved_gb": result.get("peak_reserved_gb"),
        "predicted_gb": predicted,
        "prediction": source,
        "phase": (result.get("peak_prediction") or {}).get("phase"),
        "gap": peak_model.gap(measured, predicted) if status == "ok" else None,
        "device_gb": device,
        "fits": verdict,
        "close": close,
        # a close verdict is "run it to know" (llmbench plan says close, not yes or no): not judged
        "verdict_right": None if verdict is None or ran is None or close else verdict == ran,
        "alloc_retries": retries,
        "outside_allocator_gb": _outside_allocator(result, nvml_mib),
        "failed_checks": [c.get("name") for c in result.get("checks") or [] if c.get("passed") is False],
        "error": (result.get("error") or "")[:160],
    }


def _cell(value: Any, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def markdown(rows: list[dict]) -> str:
    head = ("| model | strategy | ws | batch | seq | settings | status | measured GB | predicted GB | gap | "
            "reserved GB | plan says fits | right | failed checks |")  # fmt: skip
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        settings = ", ".join(f"{k}={v}" for k, v in r["settings"].items()) or "defaults"
        fits = "-" if r["fits"] is None else "close" if r["close"] else ("yes" if r["fits"] else "no")
        right = {True: "yes", False: "**no**", None: "-"}[r["verdict_right"]]
        gap = _cell(r["gap"], "{:+.1%}") + (" **" if r["gap"] is not None and abs(r["gap"]) > 0.10 else "")
        lines.append(
            f"| {r['model']} | {r['strategy']} | {r['world_size']} | {r['batch']} | {r['seq_len']} "
            f"| {settings} "
            f"| {r['status']} | {_cell(r['measured_gb'])} | {_cell(r['predicted_gb'])} | {gap} "
            f"| {_cell(r['reserved_gb'])} | {fits} | {right} | {', '.join(r['failed_checks']) or '-'} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    ran = [r for r in rows if r["status"] == "ok" and r["gap"] is not None]
    within = [r for r in ran if abs(r["gap"]) <= peak_model.PEAK_TOLERANCE]
    judged = [r for r in rows if r["verdict_right"] is not None]
    right = [r for r in judged if r["verdict_right"]]
    failed = [r for r in rows if r["status"] in HEALTHY and r["failed_checks"]]
    outside = [r["outside_allocator_gb"] for r in rows if r["outside_allocator_gb"] is not None]
    gaps = [r["gap"] for r in ran]
    parts = [
        f"{len(rows)} runs; peaks within {peak_model.PEAK_TOLERANCE:.0%}: {len(within)} of {len(ran)}"
        + (f" ({min(gaps):+.1%} to {max(gaps):+.1%})" if gaps else ""),
        f"plan's fit verdict right: {len(right)} of {len(judged)} that ran or ran out of memory",
        _close_line(rows),
        f"healthy runs with a failed check: {len(failed)}"
        + "".join(
            f"\n  {r['strategy']} ws{r['world_size']} b{r['batch']} s{r['seq_len']}: "
            f"{', '.join(r['failed_checks'])}"
            for r in failed
        ),
    ]
    if outside:
        parts.append(
            f"memory outside the allocator: {min(outside):.2f}-{max(outside):.2f} GB "
            f"(analysis/fit.py assumes {fit.OUTSIDE_ALLOCATOR_GB})"
        )
    tight = [r for r in rows if r["alloc_retries"]]
    for r in tight:
        ratio = r["reserved_gb"] / r["measured_gb"] if r["reserved_gb"] and r["measured_gb"] else None
        parts.append(
            f"at the limit: {r['strategy']} ws{r['world_size']} b{r['batch']} s{r['seq_len']}: "
            f"{r['alloc_retries']} allocator retries, reserved/allocated {_cell(ratio, '{:.3f}')}"
        )
    return "\n".join(parts)


def _close_line(rows: list[dict]) -> str:
    """The runs plan called close (run it to know), and what each did."""
    close = [r for r in rows if r["close"] and r["status"] in ("ok", "oom")]
    ran = sum(r["status"] == "ok" for r in close)
    return (
        f"plan said close (within {fit.NEAR:.0%} of the limit): {len(close)}, of which {ran} ran and "
        f"{len(close) - ran} ran out of memory"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="write the markdown table and summary here")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--nvml-total-mib", type=float, help="nvidia-smi's memory.total of the GPUs")
    parser.add_argument("--device-gb", type=float, help="CUDA's total for runs that recorded none")
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        parser.error(f"no such directory: {missing[0]}: give the results folder a session wrote")
    paths = sorted(p for d in args.dirs for p in d.rglob("result.json") if ".batch-search" not in p.parts)
    if not paths:
        parser.error(f"no result.json under {', '.join(map(str, args.dirs))}: nothing ran there")
    results = [(p, json.loads(p.read_text())) for p in paths]
    fallback = args.device_gb or max((d for _, r in results if (d := _device_gb(r, None))), default=None)
    rows = [row(p, r, fallback, args.nvml_total_mib) for p, r in results]
    rows.sort(key=lambda r: (str(r["model"]), r["world_size"] or 0, str(r["strategy"]), r["batch"] or 0,
                             r["seq_len"] or 0))  # fmt: skip
    text = markdown(rows) + "\n\n" + summary(rows) + "\n"
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(text if not args.out else summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
