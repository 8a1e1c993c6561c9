"""A fork server: `python -m MODULE ARGS` as forks of one process that imported torch,
transformers, PEFT and DeepSpeed once, instead of new interpreters that import them again
(4 to 7 CPU-seconds each on the 2-core CI machine, where the plugin's tests are CPU-bound:
docs/testing.md).

Standard library only on the caller's side; the server imports what it is told to preload. The
launcher starts the agents of CPU groups through one (launch/group.py); the plugin's tests start
their pytest sessions through one per pytest-xdist worker and hand its socket to those sessions
(LLMBENCH_FORKSERVER), so that their launchers fork agents from it too. Never on a GPU: a CUDA
context must not cross a fork, and some of these imports ask the driver about the GPU.

A child is what `python -m MODULE ARGS` in CWD with ENV would be, as far as it can tell: its own
session and process group, that working directory and environment, stdin from /dev/null, stdout
and stderr into the files named, `sys.argv` and `sys.orig_argv` as the command line sets them,
the signal handlers of a new interpreter, and its exit status. What a fork cannot give is a fresh
import: a library that read the environment when the server imported it keeps what it read
(nothing llmbench depends on), and where PYTHONPATH names a folder the server's imports never
saw (a stand-in module meant to replace a real one), the server refuses and the caller starts
a new process. A child dies with the server (a parent-death signal) and, when asked, with the
process that asked for it: that process keeps the write end of a pipe whose read end the child
watches, and the kernel closes it when the caller dies, however it dies.

Requests and replies are JSON lines over a Unix socket: {"module", "argv", "cwd", "env",
"stdout", "stderr", "append", "tied"} (and the pipe's read end as SCM_RIGHTS when tied) ->
{"pid"} or {"refused"}, then {"status"} when the child has exited (negative: the signal).

    python -m llmbench_pytest.launch.forkserver SOCKET MODULE[,MODULE...]   # serve until the parent dies
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from ..config.lifeline import set_parent_death_signal, with_parent_death_signal
from ..config.ranks import import_once

if TYPE_CHECKING:
    from pathlib import Path

ENV = "LLMBENCH_FORKSERVER"
"""The socket of a server that the launcher of this process may fork CPU agents from."""

_STARTING_PYTHONPATH = os.environ.get("PYTHONPATH", "")


def serve(path: str, preload: list[str]) -> None:
    import_once(preload)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection that asked for it
    while True:
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
            conn, _ = listener.accept()
            _answer(conn, listener, waiting)
        _reap(waiting)


def _answer(conn: socket.socket, listener: socket.socket, waiting: dict[int, socket.socket]) -> None:
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 1)
        while message and not message.endswith(b"\n"):
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            message += chunk
        request = json.loads(message)
    except (OSError, ValueError):
        conn.close()
        return
    refused = _refusal(request)
    if refused:
        _send(conn, {"refused": refused})
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in waiting.values():
            other.close()
        conn.close()
        _child(request, fds[0] if fds else None)  # never returns
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    waiting[pid] = conn


def _refusal(request: dict) -> str:
    """Why a fork would not be what a new process is: PYTHONPATH names a folder this server's
    imports never saw (the child's working directory, first on it, holds no module)."""
    given = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    known = {request["cwd"], *_STARTING_PYTHONPATH.split(os.pathsep)}
    unknown = [p for p in given if p not in known]
    return f"PYTHONPATH names {unknown[0]}, which this server's imports never saw" if unknown else ""


def _reap(waiting: dict[int, socket.socket]) -> None:
    for pid in list(waiting):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn = waiting.pop(pid)
            with contextlib.suppress(OSError):  # the caller gave up (its timeout) and left
                _send(conn, {"status": os.waitstatus_to_exitcode(status)})
            conn.close()


def _child(request: dict, tie: int | None) -> None:
    code = 70  # EX_SOFTWARE: the child failed before its module ran
    try:
        os.setsid()
        set_parent_death_signal()  # the server's death ends it: nothing else would, in its own session
        if tie is not None:
            threading.Thread(target=_die_with_caller, args=(tie,), daemon=True).start()
        # the handlers a new interpreter starts with (it ignores SIGPIPE)
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if request.get("append") else os.O_TRUNC)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            out = os.open(request[name], flags, 0o644)
            os.dup2(out, fd)
            os.close(out)
        code = _run_module(request["module"], request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # reported in the child's stderr, which the caller reads
        import traceback

        traceback.print_exc()
    finally:
        import atexit

        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what interpreter exit would run (the libraries' handlers)
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_module(module: str, argv: list[str]) -> int:
    """`python -m MODULE ARGV`: the command line and path as that sets them (the working
    directory first on the path; the server's first entry is its own)."""
    import runpy

    if module == "pytest":
        _forget_pytest_plugins()
    sys.orig_argv = [sys.executable, "-m", module, *argv]
    sys.argv = [module, *argv]  # runpy puts the module's file first
    sys.path[0] = os.getcwd()
    sys.modules.pop(module, None)  # runs as __main__, as in a new process, not beside a preloaded copy
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def _forget_pytest_plugins() -> None:
    """Drop pytest's entry-point plugins (and their packages' modules) from sys.modules, so that
    pytest imports them itself, rewriting their asserts, as a new process does (it warns about
    any it finds imported: anyio comes in through transformers)."""
    from importlib.metadata import entry_points

    tops = {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="pytest11")}
    for name in [m for m in sys.modules if m.split(".")[0] in tops]:
        del sys.modules[name]


def _die_with_caller(tie: int) -> None:
    """Block on the pipe the caller holds open; when it closes (the caller died, or let go), end
    this process's group: the child and whatever it started there (an agent's ranks)."""
    with contextlib.suppress(OSError):
        while os.read(tie, 1):
            pass
    os.killpg(0, signal.SIGKILL)


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


class Refused(RuntimeError):
    """The server would not fork this: start a new process instead."""


class Forked:
    """A child the server forked: as much of subprocess.Popen as its callers use (pid, poll,
    wait, returncode)."""

    def __init__(self, conn: socket.socket, pid: int, tie: int | None, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._conn = conn
        self._tie = tie
        self._buffer = b""

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status; raises subprocess.TimeoutExpired when `timeout` passes first (0:
        returns None instead, as poll does)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None and not self._buffer.endswith(b"\n"):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                if timeout == 0:
                    return None
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            chunk = self._conn.recv(4096)
            if not chunk:  # the server died; its parent-death signal took the child with it
                self._finish(-signal.SIGKILL)
                break
            self._buffer += chunk
        if self.returncode is None:
            self._finish(int(json.loads(self._buffer)["status"]))
        return self.returncode

    def _finish(self, code: int) -> None:
        self.returncode = code
        self._conn.close()
        if self._tie is not None:
            os.close(self._tie)
            self._tie = None


class Client:
    """A fork server at `path`: the one this process started (`start`), or one it was given."""

    def __init__(self, path: str, proc: subprocess.Popen | None = None) -> None:
        self.path = path
        self.proc = proc

    @classmethod
    def start(cls, folder: Path, preload: list[str], env: dict[str, str] | None = None) -> Client:
        """A server of this process's own, preloading `preload`, socket and log in `folder`; it
        dies with this process."""
        path = str(folder / f"forkserver-{os.getpid()}.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        with open(folder / f"forkserver-{os.getpid()}.log", "ab") as log:
            proc = subprocess.Popen(
                with_parent_death_signal([sys.executable, "-m", __name__, path, ",".join(preload)]),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                cwd=folder,  # not the caller's: a folder it may remove, or search for what is left there
            )
        return cls(path, proc)

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + 120  # a server just started imports torch and transformers
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                return conn
            except OSError:
                conn.close()
                if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                    raise Refused(f"no fork server answers at {self.path}") from None
                time.sleep(0.05)

    def spawn(
        self,
        module: str,
        argv: list[str],
        cwd: Path | str,
        env: dict[str, str],
        stdout: Path | str,
        stderr: Path | str,
        append: bool = False,
        tied: bool = False,
    ) -> Forked:
        """`python -m MODULE ARGV` forked; `tied`: it dies with this process. Raises Refused where
        a fork would not be what a new process is, or no server answers."""
        conn = self._connect()
        request = {"module": module, "argv": [os.fspath(a) for a in argv], "cwd": os.fspath(cwd), "env": env,
                   "stdout": os.fspath(stdout), "stderr": os.fspath(stderr), "append": append}  # fmt: skip
        read_end, tie = os.pipe() if tied else (None, None)
        rest = b""
        try:
            data = json.dumps(request).encode() + b"\n"
            sent = socket.send_fds(conn, [data], [read_end] if read_end is not None else [])
            conn.sendall(data[sent:])
            while b"\n" not in rest:  # the pid, and perhaps already the status of a short child
                chunk = conn.recv(4096)
                if not chunk:
                    raise OSError("the server closed the connection")
                rest += chunk
            line, rest = rest.split(b"\n", 1)
            reply = json.loads(line)
        except (OSError, ValueError) as exc:
            reply = {"refused": str(exc)}
        finally:
            if read_end is not None:
                os.close(read_end)
        if "pid" not in reply:
            conn.close()
            if tie is not None:
                os.close(tie)
            raise Refused(reply.get("refused", "no reply"))
        forked = Forked(conn, int(reply["pid"]), tie, [sys.executable, "-m", module, *request["argv"]])
        forked._buffer = rest
        return forked


def signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


if __name__ == "__main__":
    serve(sys.argv[1], [m for m in sys.argv[2].split(",") if m] if len(sys.argv) > 2 else [])
