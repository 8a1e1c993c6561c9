"""Where a run's files live and how they are written: never overwritten, never half-written.

Standard library only. Each pytest session writes into a folder of its own under the results
directory, named by when it started (UTC) and its session id, `results/20261125-173012-1a2b3c4d/`,
and `results/latest` links to the newest; two sessions of one command are never mixed, and a
session's folder can be reported, compared or gated on its own. Inside it files go where the
benchmark card puts them (`bench-<host>-<strategy>-ws<N>-seq<L>.log` and
`..._results/result.json`; compiling adds
`-compile`, activation checkpointing `-ckpt`, a technique off its default `-loss_chunked`,
`-fp8_tensorwise`, `-attn_flash`, a strategy's setting `-bucket_hf_auto`); a run claims its
directory with an atomic mkdir and never reuses an earlier one (a repeat of the same
configuration in one session, --llmbench-repeat, gets `-r2`, `-r3`, ...). Every write is
write-then-rename, here and in the ranks' heartbeat files (worker/progress.py).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.strategy_settings import settings_label
from .schema import RESULT_FILE

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..config.spec import RunSpec


LATEST = "latest"
"""results/latest: a symbolic link to the newest session's folder."""


def session_folder_name(session_id: str, started: float | None = None) -> str:
    """`<UTC date>-<UTC time>-<session id>`, e.g. 20261125-173012-1a2b3c4d: names sort in the order
    the sessions started (pytest-benchmark names its saved sessions by UTC time too)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(started)) + f"-{session_id}"


def is_session_folder(name: str) -> bool:
    """A folder session_folder_name made (and not `latest`, `summary` or a run's own folder)."""
    date, _, rest = name.partition("-")
    clock, _, sid = rest.partition("-")
    return len(date) == 8 and len(clock) == 6 and (date + clock).isdigit() and bool(sid)


def claim_session_dir(results_dir: Path, folder: str) -> Path:
    """Create this session's folder under results_dir and point results_dir/latest at it, unless a
    session that started later has already taken the link."""
    path = results_dir / folder
    path.mkdir(parents=True, exist_ok=True)
    link = results_dir / LATEST
    if link.exists() and not link.is_symlink():
        return path  # a folder of the user's own called "latest": left alone
    if link.is_symlink() and os.readlink(link) > folder:
        return path
    tmp = results_dir / f".{LATEST}.{os.getpid()}.tmp"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(folder, target_is_directory=True)
        os.replace(tmp, link)  # atomic: a reader sees the old link or the new one
    except OSError:
        # a file system without symbolic links: the session folders still sort by start time
        tmp.unlink(missing_ok=True)
    return path


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
    variant = settings_label(spec.to_dict(), spec.info)  # a strategy setting off its default
    stem += f"-{variant}" if variant else ""
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
