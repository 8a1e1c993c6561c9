"""One rank of a torchrun group the plugin's tests start: `python -m pytest ARGS`, forked from a
fork server of the pytest-xdist worker that started torchrun (tests/conftest.py: torchrun()).

torchrun starts this script where it would start `python -m pytest`; it asks the server named in
its environment for a fork that runs pytest with its own arguments, working directory and
environment, and stands in for it towards torchrun until it ends: the fork's output comes through
this process's stdout and stderr as it is written, the signals torchrun sends are passed on to
its process group, and this process exits as the fork did. A rank that imported pytest, torch,
transformers and DeepSpeed anew cost about 4.6 CPU-seconds on the 2-core CI machine, for a few
steps of llama-tiny.

What a fork cannot take from its environment is torch's thread count, which OpenMP reads from
OMP_NUM_THREADS when torch is loaded (torchrun sets it to 1 for each of several ranks): the fork
loads THREADS as a pytest plugin, which sets it from there, as the agent of the plugin's own
forked CPU ranks does (llmbench_pytest/worker/agent.py). Where the server refuses, pytest runs
as a new interpreter.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import tempfile
import threading

from llmbench_pytest.launch import forkserver

SERVER = "LLMBENCH_TEST_RANK_SERVER"
"""The socket of the fork server to ask (conftest.torchrun sets it)."""
THREADS = "llmbench_test_rank_threads"
"""The plugin module the server imported (conftest._forks) that sets torch's thread count."""


def _exec_pytest(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-u", "-m", "pytest", *args])


def _pump(src: int, fd: int, ended: threading.Event) -> None:
    """Copy what the fork writes into SRC to FD as it comes, and what is left once it has ended."""
    while True:
        ready, _, _ = select.select([src], [], [], 0.1)
        if ready:
            chunk = os.read(src, 1 << 16)
            while chunk:
                chunk = chunk[os.write(fd, chunk) :]
        elif ended.is_set():
            return


def _forked(path: str, args: list[str], env: dict[str, str], tmp: str) -> int | None:
    """pytest ARGS forked by the server at PATH, its output pumped to this process's, its exit
    status; None where the server refuses."""
    fifos = [os.path.join(tmp, name) for name in ("stdout", "stderr")]
    for fifo in fifos:
        os.mkfifo(fifo)
    # opened for reading and writing, which never waits for the other end: the fork's opening does
    # not wait either, and no read sees the end of the stream before the fork has opened it
    ends = [os.open(fifo, os.O_RDWR) for fifo in fifos]
    try:
        child = forkserver.Client(path).spawn(
            "pytest", ["-p", THREADS, *args], os.getcwd(), env, *fifos, tied=True
        )
    except forkserver.Refused:
        return None
    ended = threading.Event()
    pumps = [
        threading.Thread(target=_pump, args=(end, fd, ended), daemon=True)
        for end, fd in zip(ends, (1, 2), strict=True)
    ]
    for pump in pumps:
        pump.start()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda sig, _frame: forkserver.signal_group(child.pid, sig))
    code = child.wait()
    ended.set()
    for pump in pumps:
        pump.join()
    return code


def main(args: list[str]) -> int:
    path = os.environ.pop(SERVER, None)
    env = dict(os.environ)
    code = None
    if path is not None:
        with tempfile.TemporaryDirectory(prefix="llmbench-rank-") as tmp:
            code = _forked(path, args, env, tmp)
    if code is None:
        _exec_pytest(args)
    if code < 0:  # ended by a signal: so does this process, as torchrun would have seen it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
