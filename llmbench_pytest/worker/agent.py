"""torchrun's agent for a group of CPU ranks that are forks of it: `python -m llmbench_pytest.worker.agent`.

It takes torchrun's arguments (launch/group.py passes the same ones as to `torch.distributed.run`)
and runs torchrun's own elastic agent and c10d rendezvous, with one difference: the ranks are
forks of this process, which imported torch, transformers, PEFT, DeepSpeed and the worker once,
instead of new interpreters that each import them again. On the 2-core CI machine a rank's imports
cost about 6 CPU-seconds, most of what a short CPU configuration costs (docs/testing.md).

CPU groups only: a CUDA context must not cross a fork, and some of these imports ask the driver
about the GPU. On a GPU the launcher starts ranks with `torch.distributed.run`, as new processes.

What a fork cannot give is a fresh process, so a rank takes back here what a new one would have:
the signal handlers this process had before torchrun's agent installed its own (which turn
SIGTERM into an exception: a rank would catch it as its run's error and go on), the parent it
must die with (config/lifeline.py), and the intra-op thread count torchrun chose for it
(OMP_NUM_THREADS), which a new process reads when torch starts.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from typing import Any

import torch.distributed.elastic.multiprocessing as elastic_mp
import torch.distributed.elastic.multiprocessing.api as elastic_api
from torch.distributed.elastic.multiprocessing.api import MultiprocessContext
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure, record
from torch.distributed.launcher.api import elastic_launch
from torch.distributed.run import config_from_args, parse_args

from ..config.ranks import RANK_IMPORTS, import_once

RANK_MODULE = "llmbench_pytest.worker.main"
_HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
"""The signals whose handlers torchrun's agent may replace (its --signals-to-handle)."""


class _EveryFailure(MultiprocessContext):
    """torch's context for forked ranks reports one failed rank: the first its poll finds, which
    is the lowest when several died between two polls. torchrun's context for new processes
    reports every one, and the launcher tells the cause from the symptoms among them
    (launch/diagnose.py): without the others, a rank SIGKILLed and the peer whose collective
    failed a moment later read as the peer's exit code 1. So every rank that did not end well is
    reported; those the agent stopped itself read as SIGTERM, as they do from torchrun."""

    def _poll(self) -> Any:
        result = super()._poll()
        if result is not None and result.failures and self._pc is not None:
            for local_rank, proc in enumerate(self._pc.processes):
                if local_rank not in result.failures and proc.exitcode not in (0, None):
                    result.failures[local_rank] = _Failure(
                        local_rank=local_rank,
                        pid=proc.pid,
                        exitcode=proc.exitcode,
                        error_file=self.error_files[local_rank],
                    )
        return result


class _Failure(ProcessFailure):
    """torch's record of a failed rank, which reads the rank's error file: a rank stopped while it
    wrote that file (the SIGKILL that follows the agent's SIGTERM) leaves it empty or cut short, and
    torch's record raises on it, which ended the agent with exit code 70 instead of reporting the
    rank. A record is made only of a rank that has ended, so no one writes the file any more: a cut
    one is removed and the failure reads as its exit code or signal, as a rank that wrote none (the
    launcher's diagnosis reads the rank's log, not this file)."""

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ValueError:  # json's decode error
            os.remove(self.error_file)
            super().__post_init__()


def _rank(agent_pid: int, handlers: dict[int, Any], *argv: str) -> None:
    """One rank: the worker's main in a fork of the agent. Returns None when the rank ends well
    (torch's process context waits for a return value); exits with the worker's code otherwise."""
    import torch

    from ..config import lifeline
    from .main import main

    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    lifeline.expect_parent(agent_pid)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    code = main(list(argv), forked=True)
    if code:
        sys.exit(code)


@record
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not (args.module and args.training_script == RANK_MODULE):
        sys.exit(f"llmbench's agent runs only `-m {RANK_MODULE}`, not {args.training_script!r}")
    if args.standalone:  # as torchrun does: a c10d rendezvous on a free localhost port
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    # before the imports: for two or more ranks it sets OMP_NUM_THREADS, which torch reads at start
    config, _, _ = config_from_args(args)
    config.start_method = "fork"
    elastic_mp.MultiprocessContext = _EveryFailure  # what start_processes builds for a function
    elastic_api.ProcessFailure = _Failure  # what that context's poll builds for a failed rank
    import_once(RANK_IMPORTS)
    handlers = {sig: signal.getsignal(sig) for sig in _HANDLED}  # before the agent installs its own
    elastic_launch(config=config, entrypoint=_rank)(os.getpid(), handlers, *args.training_script_args)


if __name__ == "__main__":
    main()
