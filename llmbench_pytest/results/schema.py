"""result.json's shape: the benchmark card's leading fields, the file name, the schema version, its units.

Standard library only; read by the results builder, the report and the metrics CSV alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from .storage import RunPaths

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"

SEED_FIELDS = (
    "strategy",
    "world_size",
    "rank",
    "seq_len",
    "tier",
    "steps",
    "per_device_batch",
    "grad_accum",
    "tokens_per_sec",
    "mean_step_time_sec",
    "mean_loss",
    "peak_vram_gb",
    "h2d_gbps_per_gpu",
)
"""The first thirteen fields, exactly the benchmark card's example and in its order, so tools
written for it keep working; everything llmbench adds follows them."""

GB = 1e9  # result files use decimal GB, as the benchmark card does (13.96808448 GB)

RENAMED_FIELDS = {"step_time_cv": "step_cv_in_run"}
"""Fields renamed since result files were first written, old name: today's. `step_time_cv` was the
coefficient of variation of the step times within one run, the name the `step_time_cv` check (which
compares runs) also has; files written before the rename still read through `current_fields`."""


def current_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A result document with every renamed field under today's name: a file written before a
    rename reads as one written today (a field under both names keeps today's value)."""
    if not any(old in data for old in RENAMED_FIELDS):
        return data
    out = dict(data)
    for old, new in RENAMED_FIELDS.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


class RunResult(Mapping[str, Any]):
    """A result.json document with its location; fields read as keys or attributes."""

    def __init__(self, data: dict[str, Any], paths: RunPaths | None) -> None:
        self.data = data
        self.paths = paths

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __getattr__(self, key: str) -> Any:
        try:
            return self.__dict__["data"][key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def path(self) -> Path | None:
        return self.paths.result if self.paths else None

    def __repr__(self) -> str:
        return f"RunResult({self.data.get('strategy')}, status={self.data.get('status')}, path={self.path})"
