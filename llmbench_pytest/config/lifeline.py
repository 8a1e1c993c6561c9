"""Processes that must not outlive the pytest session that started them: the parent-death signal.

Standard library only, shared by both sides: the launcher sets the signal on torchrun's agent (a
child of pytest) as it starts it, and each rank sets it on itself (ranks are children of the
agent, in sessions of their own, so no signal sent to pytest's process group reaches them). When
pytest is SIGKILLed (the OOM killer, a CI hard kill), the kernel kills the agent, then the ranks:
no rank keeps training, or holding GPU memory, for a controller that is gone.

Linux only (prctl PR_SET_PDEATHSIG); elsewhere, and as a second line, a waiting rank notices that
the launcher's process (LLMBENCH_LAUNCHER_PID) or its own parent is gone, and leaves. A CPU rank
is a fork of its agent, which imported this module, so it names its parent (`expect_parent`)
instead of the one this module saw at import; a CPU agent, a fork of a server, is tied to pytest
by a pipe instead (launch/forkserver.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
LAUNCHER_PID_ENV = "LLMBENCH_LAUNCHER_PID"
_parent = os.getppid()


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent exits; True where it can.
    Safe as a subprocess preexec function (no allocation beyond ctypes' call)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def expect_parent(pid: int) -> None:
    """The parent this process must die with, where it is not the one it had when this module was
    imported: a rank forked from an agent that imported it (worker/agent.py)."""
    global _parent
    _parent = pid


def die_with_parent() -> None:
    """Set the parent-death signal on this process; if the parent already exited before it was set
    (the signal would never come), exit at once."""
    set_parent_death_signal()
    if parent_gone():
        os._exit(1)


def parent_gone() -> bool:
    """The parent this process started with has exited, or the launcher that started the group."""
    if os.getppid() != _parent:
        return True
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher and launcher.isdigit():
        try:
            os.kill(int(launcher), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    return False


# Sets the parent-death signal, leaves if the parent is already gone, then becomes the real command
# (execv keeps the process and the signal): a preexec function would do the same, but forking a
# process that runs threads (a progress display, NVML) and running Python before exec is unsafe.
_SHIM = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def with_parent_death_signal(command: list[str]) -> list[str]:
    """`command`, started so that it is SIGKILLed when this process dies (Linux; unchanged elsewhere)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", _SHIM, str(os.getpid()), *command]
