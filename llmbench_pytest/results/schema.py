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
