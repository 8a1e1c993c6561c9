"""How many host cores and threads each GPU rank gets: a choice, stated, the same at every world
size. Standard library only (the launcher sets it in the group's environment; each rank applies
its own share before torch or DeepSpeed start a thread pool).

Unless the user sets OMP_NUM_THREADS, each GPU rank gets its share of the cores this process may
use (cores / ranks on the node, at least one), bound to a disjoint, contiguous slice of them, as
DeepSpeed's own launcher does with --bind_cores_to_rank; torch's intra-op threads and DeepSpeed's
CPU Adam (OpenMP, which reads OMP_NUM_THREADS) use that many. Without it torchrun sets
OMP_NUM_THREADS=1 whenever it starts several ranks and leaves a single rank all the cores, so a
2-GPU run's offload optimizer ran on one thread per rank against 64 for the 1-GPU run it is
compared with: zero2_offload "scaled" 44% at 2 and 56% at 4 GPUs on 4x H200, 116% and 118% with
16 threads per rank (2026-11-27): the figure measured the launcher, not the strategy.

On a CPU device the ranks' compute is the host itself: each rank keeps one intra-op thread, as
torchrun gives it (worker/dist.py), and is not bound, so that several sessions of the plugin's
tests on one small machine are not pinned onto the same cores.
"""

from __future__ import annotations

import os

BIND_ENV = "LLMBENCH_BIND_CORES"
"""The cores a group's ranks share out, as a comma list; set by the launcher, read by each rank."""
POLICY_ENV = "LLMBENCH_HOST_SHARE"
"""How the ranks' threads were chosen ("share" or "user"), for result.json."""


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity: an xdist worker's slice, a cgroup's set)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS: no affinity; all cores
        return list(range(os.cpu_count() or 1))


def slice_for(cores: list[int], ranks: int, local_rank: int) -> list[int]:
    """Local rank `local_rank`'s disjoint, contiguous share of `cores` over `ranks` ranks: len //
    ranks each (the remainder unused, as --bind_cores_to_rank leaves it); with fewer cores than
    ranks, ranks share them round robin, one core each."""
    if not cores or ranks < 1:
        return list(cores)
    per = len(cores) // ranks
    if per == 0:
        return [cores[local_rank % len(cores)]]
    return cores[local_rank * per : (local_rank + 1) * per]


def group_env(
    environ: dict[str, str], ranks_on_node: int, device: str, cores: list[int] | None = None
) -> dict[str, str]:
    """What the launcher adds to a group's environment: each GPU rank's thread count and the cores
    its ranks divide (`cores`, else all this process may use), unless the user chose
    OMP_NUM_THREADS (then only the policy's name)."""
    if "OMP_NUM_THREADS" in environ:
        return {POLICY_ENV: "user"}
    if device != "cuda":
        return {}
    cores = cores or usable_cores()
    threads = max(1, len(cores) // max(1, ranks_on_node))
    return {
        "OMP_NUM_THREADS": str(threads),
        BIND_ENV: ",".join(str(c) for c in cores),
        POLICY_ENV: "share",
    }


def bind_this_rank(local_rank: int, ranks_on_node: int) -> list[int] | None:
    """In a rank, before any thread pool starts: bind to this rank's slice of the cores the
    launcher named (BIND_ENV); threads created later inherit it. None where none was named."""
    named = os.environ.get(BIND_ENV, "")
    cores = [int(c) for c in named.split(",") if c.strip().isdigit()]
    if not cores:
        return None
    mine = slice_for(cores, ranks_on_node, local_rank)
    try:
        os.sched_setaffinity(0, mine)
    except (AttributeError, OSError):
        return None
    return mine


def describe(
    threads: int, cores: list[int] | None, ranks_on_node: int, device: str = "cuda"
) -> dict[str, object]:
    """result.json's record of a rank's host share (metadata.host_share)."""
    policy = os.environ.get(POLICY_ENV) or ("user" if "OMP_NUM_THREADS" in os.environ else "default")
    if device != "cuda" and policy != "user":
        policy = "cpu device: one thread per rank"  # the ranks' compute is the host (worker/dist.py)
    note = None
    if policy in ("user", "default") and os.environ.get("OMP_NUM_THREADS") == "1" and ranks_on_node > 1:
        note = (
            "OMP_NUM_THREADS=1 with several ranks on the node (torchrun sets it unless it is set): "
            "work on the host, such as offload's CPU optimizer, runs on one thread per rank"
        )
    return {
        "policy": policy,
        "threads": threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cores": ranges(cores) if cores else None,
        "core_count": len(cores) if cores else None,
        "ranks_on_node": ranks_on_node,
        "note": note,
    }


def ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    start = prev = cores[0]
    for c in [*cores[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if c is not None:
            start = prev = c
    return ",".join(out)
