"""A fork server for the pytest sessions the tests start: each session a fork of one process that
imported pytest, torch, transformers, peft and DeepSpeed once, instead of a new interpreter
importing them again (3 to 7 CPU-seconds a session on the 2-core CI machine, where the suite is
CPU-bound: docs/testing.md).

The child is what `python -m pytest ARGS` in CWD with ENV would be, as far as a session can tell:
its own session and process group, that working directory and environment, stdin from /dev/null,
stdout and stderr into the files the caller reads, `sys.argv` and `sys.orig_argv` as the command
line would set them, default signal handlers, and pytest.main's exit code as its exit status. What
a fork cannot give is a fresh import: a library that read the environment when the server imported
it keeps what it read (nothing the sessions here depend on; tests/conftest.py leaves the server out
where a GPU is present, since a CUDA context must not cross a fork). Ranks that a session's launcher
starts are still fresh processes: torchrun starts them.

One server per pytest-xdist worker, started at the first session a test asks for and ended with the
worker (a parent-death signal). Requests and replies are JSON lines over a Unix socket:
{"argv", "cwd", "env", "stdout", "stderr"} -> {"pid"}, then {"status"} when the child has exited
(a negative status is the signal that ended it). The caller enforces its timeout by killing the
child's process group.

    python tests/forkserver.py SOCKET_PATH      # serve until the parent dies
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PRELOAD = (
    "pytest",
    "_pytest.pytester",
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.models.mistral.modeling_mistral",
    "transformers.models.gpt2.modeling_gpt2",
    "peft",
    "deepspeed",
)
"""What a session imports on the way to its first run (in-process sessions train in the pytest
process; launcher sessions import only pytest). Not the plugins pytest loads from entry points
(xdist, pytest-benchmark, llmbench): pytest rewrites their asserts when it imports them, and warns
about any it finds imported already; the child drops those that came in anyway (anyio, through
transformers) so that pytest imports them as in a new process."""


def serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(Exception):  # a missing extra is imported by the child, or not
            importlib.import_module(name)
    sys.stdout.flush()
    sys.stderr.flush()
    # what was imported moves out of the collector's sight: a child's collections would otherwise
    # walk every object of torch and transformers and, by touching them, copy their pages
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection that asked for it
    while True:
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
            conn, _ = listener.accept()
            request = json.loads(_read_line(conn))
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in waiting.values():
                    other.close()
                _child(request, conn)  # never returns
            _send(conn, {"pid": pid})
            waiting[pid] = conn
        _reap(waiting)


def _reap(waiting: dict[int, socket.socket]) -> None:
    for pid in list(waiting):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn = waiting.pop(pid)
            with contextlib.suppress(OSError):  # the caller gave up (its timeout) and left
                _send(conn, {"status": os.waitstatus_to_exitcode(status)})
            conn.close()


def _child(request: dict, conn: socket.socket) -> None:
    code = 70  # EX_SOFTWARE: the child failed before pytest ran
    try:
        conn.close()
        os.setsid()
        _die_with_parent()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        args = request["argv"]
        _forget_plugins()
        import pytest

        # as `python -m pytest` sets them: the command line, and the working directory first on
        # the path (the server's own first entry is this file's folder)
        sys.argv = [str(Path(pytest.__file__).with_name("__main__.py")), *args]
        sys.orig_argv = [sys.executable, "-m", "pytest", *args]
        sys.path[0] = os.getcwd()
        code = int(pytest.main(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # reported in the child's stderr, which the caller reads
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what interpreter exit would run (the libraries' handlers)
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _forget_plugins() -> None:
    """Drop pytest's entry-point plugins (and their packages' modules) from sys.modules, so that
    pytest imports them itself, rewriting their asserts, as a new process does."""
    from importlib.metadata import entry_points

    tops = {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="pytest11")}
    for name in [m for m in sys.modules if m.split(".")[0] in tops]:
        del sys.modules[name]


def _die_with_parent() -> None:
    """SIGKILL this child when the server dies (the worker that owns it died): its own session
    keeps it from the terminal's signals, so nothing else would end it. Its ranks follow it (the
    launcher's lifeline)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the fork server closed the connection")
        data += chunk
    return data


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


_STARTING_ENV = dict(os.environ)
"""This worker's environment before any test changed it: the server's, whichever test starts it."""


class Client:
    """The server of this process, started at the first `run`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = str(folder / f"forkserver-{os.getpid()}.sock")
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        from llmbench_pytest.config.lifeline import with_parent_death_signal

        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        log = open(self.folder / f"forkserver-{os.getpid()}.log", "ab")
        self.proc = subprocess.Popen(
            with_parent_death_signal([sys.executable, __file__, self.path]),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=_STARTING_ENV,
        )
        log.close()

    def _connect(self) -> socket.socket:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        deadline = time.monotonic() + 120  # the server imports torch, transformers and DeepSpeed
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                return conn
            except OSError:
                conn.close()
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the tests' fork server did not start (see {self.folder})") from None
                time.sleep(0.05)

    def serves(self, cwd: Path, env: dict[str, str]) -> bool:
        """Whether a fork is what a new process would be: not where PYTHONPATH puts a folder the
        server's imports never saw before its own (a stand-in module a test means to load
        instead of the real one); the session's own folder, first on it, holds no module."""
        given = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        known = {str(cwd), *_STARTING_ENV.get("PYTHONPATH", "").split(os.pathsep)}
        return all(p in known for p in given)

    def run(
        self, args: list[str], cwd: Path, env: dict[str, str], stdout: Path, stderr: Path, timeout: float
    ) -> int:
        """`python -m pytest ARGS` forked; its exit status (negative: the signal that ended it).
        Raises subprocess.TimeoutExpired after killing it when it runs past `timeout`."""
        conn = self._connect()
        try:
            files = {"stdout": str(stdout), "stderr": str(stderr)}
            _send(conn, {"argv": args, "cwd": str(cwd), "env": env, **files})
            conn.settimeout(timeout)
            buffer = conn.makefile("rb")
            pid = json.loads(buffer.readline())["pid"]
            try:
                line = buffer.readline()
            except TimeoutError:
                _signal_group(pid, signal.SIGKILL)  # as pytester kills a session past its timeout
                raise subprocess.TimeoutExpired(["pytest", *args], timeout) from None
            except BaseException:
                # Ctrl-C or an ending worker: the session (its own process session, which the
                # terminal's SIGINT does not reach) ends as the plugin ends on SIGTERM
                _signal_group(pid, signal.SIGTERM)
                raise
            if not line:
                raise RuntimeError("the tests' fork server ended while a session ran")
            return int(json.loads(line)["status"])
        finally:
            conn.close()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


if __name__ == "__main__":
    serve(sys.argv[1])
