"""Where a run's files live and how they are written: never overwritten, never half-written.

Standard library only. Files go where the benchmark card puts them
(`results/bench-<host>-<strategy>-ws<N>-seq<L>.log` and `..._results/result.json`; compiling adds
`-compile`, activation checkpointing `-ckpt`, a technique off its default `-loss_chunked`,
`-fp8_tensorwise`, `-attn_flash`); a run claims its
directory with an atomic mkdir and never reuses an earlier one (a second run of the same
configuration gets `-r2`, `-r3`, ...). Every write is write-then-rename, here and in the ranks'
heartbeat files (worker/progress.py).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .schema import RESULT_FILE

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..config.spec import RunSpec


def short_host() -> str:
    return socket.gethostname().split(".")[0] or "host"


@dataclass(frozen=True)
class RunPaths:
    base: Path
    """results/bench-<host>-<strategy>-ws<N>-seq<L>[-rK]"""

    @property
    def log(self) -> Path:
        return self.base.with_name(self.base.name + ".log")

    @property
    def directory(self) -> Path:
        return self.base.with_name(self.base.name + "_results")

    @property
    def result(self) -> Path:
        return self.directory / RESULT_FILE


def claim_run_paths(results_dir: Path, spec: RunSpec, host: str | None = None) -> RunPaths:
    """Create this run's result directory; an existing one (an earlier run) is never reused."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{host or short_host()}-{spec.name}-ws{spec.world_size}-seq{spec.seq_len}"
    # the benchmark card's name is a pretraining run's; another workload, a diagnostic variant, data
    # from disk and the technique axes off their defaults name the run too, so that the default
    # session's LoRA and encoder-decoder folders do not read as repeats (-r2, -r3) of pretraining
    stem += f"-{spec.workload}" if spec.workload != "causal_lm" else ""
    stem += f"-{spec.diagnostic}" if spec.diagnostic else ""
    stem += f"-{spec.data}" if spec.data != "memory" else ""
    # compiled or checkpointed runs beside the eager one are other configurations, not its repeats
    stem += "-compile" if spec.compile else ""
    stem += "-ckpt" if spec.grad_ckpt else ""
    for prefix, value, default in (
        ("loss", spec.fused_loss, "none"),
        ("fp8", spec.fp8, "none"),
        ("attn", spec.attention, "default"),
    ):
        stem += f"-{prefix}_{value}" if value != default else ""
    for k in range(1, 10_000):
        base = results_dir / (stem if k == 1 else f"{stem}-r{k}")
        try:
            RunPaths(base).directory.mkdir()
        except FileExistsError:
            continue
        return RunPaths(base)
    raise RuntimeError(f"{results_dir}: 10,000 runs named {stem} already; clean the directory")


def write_text_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Write next to the target, then rename: readers see the old text or the new, never half.
    `durable` also flushes it to disk first (results); a heartbeat rewritten every second skips that."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=_json_default, allow_nan=False) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return repr(obj)
