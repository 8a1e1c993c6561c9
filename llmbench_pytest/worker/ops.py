"""Runs inside each rank: DeepSpeed's just-in-time ops, built once per machine and reused.

DeepSpeed compiles some ops the first time a process needs them: CPU Adam for offload (on any
device), the shared-memory all-reduce of its CPU backend, async I/O for NVMe. torch builds them
into its extensions directory behind a `lock` file (torch.utils.file_baton.FileBaton) that every
other process waits on until it disappears. Three things go wrong there, and this module handles
them before the strategy asks DeepSpeed for the op:

- A build costs minutes the first time (CPU Adam with nvcc on a fresh GPU host): it is timed
  here, apart from the run's setup, and reported in result.json (`timing.ops`), and the rank keeps
  beating its heartbeat meanwhile so the launcher does not take the build for a hang.
- A build killed midway (Ctrl-C, a hang's SIGKILL) leaves the lock behind and every later process
  waits forever. The baton records no owner, so llmbench holds its own flock around the build: a
  lock file that no process holds open while we hold the flock is stale, and is removed with a
  log line. A live build by another program holds the baton open and is waited for.
- Two Python environments with the same Python version share torch's default directory, and each
  rebuilds the op over the other's (their include paths differ). Unless TORCH_EXTENSIONS_DIR is
  set, the ops go to a directory of their own per torch and DeepSpeed installation.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..results.storage import write_json_atomic
from .progress import note

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import torch

    from ..config.spec import RunSpec

HEARTBEAT_S = 5.0
FLOCK_NAME = ".llmbench-build.flock"


def needed_ops(spec: RunSpec, device: torch.device) -> list[str]:
    """DeepSpeed op builders this run loads: CPU Adam for offload, async I/O for NVMe, and on the
    CPU the shared-memory all-reduce DeepSpeed's comm backend loads in every process."""
    names = []
    if device.type == "cpu":
        names.append("ShareMemCommBuilder")
    if spec.offload != "none":
        names.append("CPUAdamBuilder")
    if spec.offload == "nvme":
        names.append("AsyncIOBuilder")
    return names


def extensions_root() -> Path:
    """Where torch builds extensions: TORCH_EXTENSIONS_DIR when set, else a directory per torch and
    DeepSpeed installation (set in the environment, so DeepSpeed's own loads use it too)."""
    given = os.environ.get("TORCH_EXTENSIONS_DIR")
    if given:
        return Path(given)
    import deepspeed
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    where = f"{torch.__file__}|{torch.__version__}|{deepspeed.__file__}|{deepspeed.__version__}"
    tag = hashlib.sha256(where.encode()).hexdigest()[:10]
    root = (
        Path(get_default_build_root()) / f"py{sys.version_info.major}{sys.version_info.minor}-llmbench-{tag}"
    )
    os.environ["TORCH_EXTENSIONS_DIR"] = str(root)
    return root


def prepare_ops(spec: RunSpec, device: torch.device, log: logging.Logger) -> dict[str, Any]:
    """Load (building on first use) the ops this run needs; {op: {sec, compiled, dir}}."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if device.type == "cuda" else "cpu")
    ask_cpuinfo_once()
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder.builder import OpBuilder

    out: dict[str, Any] = {}
    for builder_name in needed_ops(spec, device):
        builder = get_accelerator().create_op_builder(builder_name)
        if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            continue  # DeepSpeed will not load it either
        if builder.NAME in OpBuilder._loaded_ops:
            continue  # loaded by an earlier run in this process
        out[builder.NAME] = load_op(builder, extensions_root() / builder.NAME, log)
    return out


def ask_cpuinfo_once() -> None:
    """Keep py-cpuinfo's first answer for the rest of the process. DeepSpeed asks it what the CPU
    is twice per CPU Adam load (its compiler flags) and once per CPU Adam optimizer it creates, and
    each answer is a new Python process of py-cpuinfo's own: 1.1 s apiece, 4.8 s of a test_pretrain
    session's single rank on 1x H100 (2026-11-26, docs/results/2026-11-26-h100-pretrain-fresh-host).
    The CPU does not change under a running process; each caller gets its own copy of the answer.
    The first answer is also kept for the machine (`_machine_answer`): the ops built ahead ask at
    the session's start, and the rank's first CPU Adam load then reads it instead of paying 1.1 s."""
    try:
        import cpuinfo
    except ImportError:  # DeepSpeed then fails its own import of it, with its own message
        return
    if getattr(cpuinfo.get_cpu_info, "llmbench_once", False):
        return
    ask = cpuinfo.get_cpu_info
    first = functools.cache(lambda: _machine_answer(ask))

    def get_cpu_info() -> dict[str, Any]:
        return dict(first())

    get_cpu_info.llmbench_once = True  # type: ignore[attr-defined]
    cpuinfo.get_cpu_info = get_cpu_info


def cpuinfo_file() -> Path | None:
    """Where this machine's py-cpuinfo answer is kept, named by the kernel's boot id: a CPU does
    not change while the machine is up, and a reboot (or another machine sharing the home
    directory) finds no file of its own and asks again. None where there is no boot id."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    return extensions_root() / f"cpuinfo-{os.uname().nodename}-{boot}.json"


def _machine_answer(ask: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    path = cpuinfo_file()
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            kept = json.loads(path.read_text())
            if isinstance(kept, dict) and kept:
                return kept
    answer = ask()
    if path is not None:
        with contextlib.suppress(OSError, TypeError, ValueError):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, answer)
    return answer


BUILDERS = {"shm_comm": "ShareMemCommBuilder", "cpu_adam": "CPUAdamBuilder", "async_io": "AsyncIOBuilder"}
"""The ops `llmbench ops` builds ahead of time, by the names users know them by."""


def default_ahead(device_type: str, nvme: bool) -> list[str]:
    """What a machine's sessions load: on a CPU the shared-memory all-reduce (every DeepSpeed run)
    and CPU Adam (offload); on a GPU CPU Adam, and async I/O where zero3_nvme will run."""
    names = ["shm_comm", "cpu_adam"] if device_type == "cpu" else ["cpu_adam"]
    return [*names, "async_io"] if nvme else names


def build_ahead(names: list[str], device_type: str, log: logging.Logger) -> dict[str, Any]:
    """Build (or find built) the named ops where sessions will look for them, before any session:
    {name: {sec, compiled, dir}, or {error} for an op that cannot be built here}."""
    os.environ.setdefault("DS_ACCELERATOR", device_type)
    ask_cpuinfo_once()
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    out: dict[str, Any] = {}
    for name in names:
        builder = get_accelerator().create_op_builder(BUILDERS[name])
        if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            out[name] = {"error": f"DeepSpeed cannot build {builder.NAME if builder else name} here"}
            continue
        log.info(
            "DeepSpeed op %s: loading it from %s, building it if it is not there",
            builder.NAME,
            extensions_root(),
        )
        out[name] = load_op(builder, extensions_root() / builder.NAME, log)
    return out


def load_op(builder: Any, build_dir: Path, log: logging.Logger) -> dict[str, Any]:
    build_dir.mkdir(parents=True, exist_ok=True)
    before = _newest_library(build_dir)
    started = time.perf_counter()
    with _beating(log, builder.NAME, started), _build_lock(build_dir, log) as waited_s:
        # a build another process finished while we waited is found here, not compiled again
        before = before if not waited_s else _newest_library(build_dir)
        clear_stale_baton(build_dir / "lock", log)
        arch_list, path = _deepspeed_arch_list(), _environment_ninja_path()
        with _environ("TORCH_CUDA_ARCH_LIST", arch_list), _environ("PATH", path):
            builder.load(verbose=False)
    seconds = time.perf_counter() - started
    compiled = _newest_library(build_dir) != before
    log.info("DeepSpeed op %s %s in %.1f s (%s)", builder.NAME, "compiled" if compiled else "loaded",
             seconds, build_dir)  # fmt: skip
    return {"sec": seconds, "compiled": compiled, "waited_sec": waited_s, "dir": str(build_dir)}


def _newest_library(build_dir: Path) -> float:
    return max((p.stat().st_mtime for p in build_dir.glob("*.so")), default=0.0)


@contextlib.contextmanager
def _build_lock(build_dir: Path, log: logging.Logger) -> Iterator[float]:
    """llmbench's own lock around a build: the kernel releases it when its holder dies, so whoever
    holds it knows no other llmbench process is building this op. Yields the seconds spent
    waiting for another process's build (0.0 when none held the lock)."""
    with open(build_dir / FLOCK_NAME, "a") as handle:
        waited = 0.0
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is building %s; waiting for it", build_dir.name)
            started = time.perf_counter()
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = time.perf_counter() - started
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clear_stale_baton(lock: Path, log: logging.Logger, settle_s: float = 1.0) -> bool:
    """Remove torch's build lock when no process holds it open (FileBaton keeps its file open for as
    long as it builds). Seen unheld twice, `settle_s` apart: a build that was just releasing it
    has removed it by then. Returns whether it was removed."""
    for attempt in range(2):
        if not lock.exists():
            return False
        holders = baton_holders(lock)
        if holders is None or holders:
            if holders:
                log.info(
                    "%s is held by process %s: waiting for its build", lock, ", ".join(map(str, holders))
                )
            return False  # a live build, or /proc cannot tell: leave it to torch's wait
        if attempt == 0:
            time.sleep(settle_s)
    lock.unlink(missing_ok=True)
    log.warning(
        "removed a stale DeepSpeed build lock %s: no process holds it (a build was killed midway); "
        "building %s again",
        lock,
        lock.parent.name,
    )
    return True


def baton_holders(lock: Path) -> list[int] | None:
    """Processes with `lock` open, from /proc/<pid>/fd; None where /proc cannot be read."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    target = os.path.realpath(lock)
    holders = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            try:
                if os.readlink(fd) == target:
                    holders.append(int(entry.name))
                    break
            except OSError:
                continue
    return holders


@contextlib.contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    """The environment variable `name` set to `value` (left alone when None) for the block, and
    put back as it was after it."""
    given = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if given is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = given


def _deepspeed_arch_list() -> str | None:
    """DeepSpeed's op builder rejects arch suffixes (TORCH_CUDA_ARCH_LIST=9.0a: DeepSpeed issue
    7589): the list the strategy gives DeepSpeed, to build with, or None where the given one does."""
    from .strategies.deepspeed_zero import deepspeed_safe_arch_list

    given = os.environ.get("TORCH_CUDA_ARCH_LIST")
    safe = deepspeed_safe_arch_list(given)
    return safe if safe and safe != given else None


def _environment_ninja_path() -> str | None:
    """torch builds with the first `ninja` on PATH, and ninja 1.11 and 1.12+ hash a command line
    differently: an op built by one is "command line changed" to the other and compiled again (a
    minute per op on two cores), and back at the next session that finds the other one first
    (`.venv/bin/llmbench ops` beside an activated `make test` did, on every CI run). The PATH to
    build with: the ninja installed beside DeepSpeed in this Python environment (the `ninja`
    package DeepSpeed requires) first, wherever it exists; None where there is none."""
    try:
        from ninja import BIN_DIR
    except ImportError:  # no ninja package: torch finds one on PATH or says it needs one
        return None
    if not os.path.isfile(os.path.join(BIN_DIR, "ninja")):
        return None
    given = os.environ.get("PATH")
    return BIN_DIR + (os.pathsep + given if given else "")


@contextlib.contextmanager
def _beating(log: logging.Logger, name: str, started: float) -> Iterator[None]:
    """Keep the heartbeat fresh while an op builds for minutes: the launcher would call it a hang."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            note(log, logging.INFO, {"phase": "building"},
                 "building DeepSpeed op %s (once per machine): %.0f s so far", name,
                 time.perf_counter() - started)  # fmt: skip

    thread = threading.Thread(target=beat, name=f"llmbench-build-{name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
