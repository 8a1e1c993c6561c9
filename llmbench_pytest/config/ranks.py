"""Where this process sits in a torchrun job, read from the environment torchrun sets.

Standard library only, so the plugin can decide at start-up which rank writes files and prints.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True, slots=True)
class RankEnv:
    """This process's place in the job; a plain `pytest` run is rank 0 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    group_rank: int = 0
    """The node's index (torchrun's GROUP_RANK)."""
    under_torchrun: bool = False

    @property
    def is_writer(self) -> bool:
        """Only rank 0 prints results and writes files."""
        return self.rank == 0

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def _int(name: str, default: int) -> int:
    value = os.environ.get(name)
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def rank_env() -> RankEnv:
    under = "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)
    if not under:
        return RankEnv()
    world = _int("WORLD_SIZE", 1)
    return RankEnv(
        rank=_int("RANK", 0),
        world_size=world,
        local_rank=_int("LOCAL_RANK", 0),
        local_world_size=_int("LOCAL_WORLD_SIZE", world),
        group_rank=_int("GROUP_RANK", 0),
        under_torchrun=True,
    )


RANK_IMPORTS = (
    "llmbench_pytest.worker.main",
    "transformers.models.llama.modeling_llama",
    "transformers.models.mistral.modeling_mistral",
    "transformers.models.gpt2.modeling_gpt2",
    "peft",
    "deepspeed",
)
"""What a CPU rank imports on its way to its runs: imported once by the agent its ranks are forks
of (worker/agent.py), or by the fork server the agent itself is a fork of (launch/forkserver.py)."""


def import_once(names: Iterable[str]) -> None:
    """Import `names` in a process that forks what needs them (an agent, a fork server), then move
    what was imported out of the collector's sight: the forks' collections would otherwise walk
    every object of torch and transformers and, by touching them, copy their pages. One that is
    missing (an extra not installed) is left to the fork, which imports it, or reports the error."""
    import gc
    import importlib
    import sys

    if any(name.startswith("transformers") for name in names):
        # what transformers imports for features no benchmark uses, answered "no" first as a rank
        # answers it (worker/lean_imports.py): the forks inherit this process's imports
        with contextlib.suppress(Exception):
            importlib.import_module("llmbench_pytest.worker.lean_imports").skip_unused_imports()
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    gc.collect()
    gc.freeze()
    sys.stdout.flush()  # nothing buffered here is written again by each fork
    sys.stderr.flush()
