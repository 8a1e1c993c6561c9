"""Run a pytest session as a child of a tool, so that ending the tool ends the session; and a
probe's child process, whose figures are the JSON line it prints last (`figures_of`).

    from _child import run_session           # with tools/ on sys.path (the tools put it there)
    done = run_session([sys.executable, "-m", "pytest", ...], cwd=REPO, capture_output=True)

The child starts in a process group (and session) of its own: a Ctrl-C on the terminal reaches
only the tool, and the tool hands it on, once, to the whole group. While the child runs, SIGINT
and SIGTERM (and SIGHUP, handed on as SIGTERM) are forwarded to that group, and the tool waits for
the session to end the way pytest ends on Ctrl-C: the run in progress recorded as interrupted, its
torchrun group ended by the plugin. torchrun's agent and the ranks run in sessions of their own
(the plugin's doing) that no group signal reaches; they die with pytest through their
parent-death signal, and a tool that has to give up waiting (after GRACE_S, or at a second
signal) SIGKILLs pytest's group and every process below pytest it can see in /proc.

Without this a tool ended by SIGTERM (a CI timeout, `kill`) died alone and left pytest, torchrun
and the ranks running. A signal the tool ignores (`nohup`, a background job's SIGINT) stays
ignored. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GRACE_S = 60.0
"""How long the session may take to end after the first signal (the plugin stops its ranks within
about 20 s) before its processes are killed."""

FORWARDED = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}
"""Signal received by the tool: signal sent to the session."""

_POLL_S = 0.25


class Session(subprocess.CompletedProcess):
    """A finished child: `subprocess.CompletedProcess` plus `signal`, the signal that ended the
    tool's wait (the first one received while the child ran), or None."""

    def __init__(self, args: Any, returncode: int, stdout: Any, stderr: Any, sig: int | None) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.signal = sig


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), from /proc; [] without /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group and every process below it (those in sessions of their
    own included), collected before the child dies and they are handed to init."""
    below = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def run_session(
    cmd: list[str],
    *,
    capture_output: bool = False,
    grace_s: float = GRACE_S,
    exit_on_signal: bool = True,
    **popen_kwargs: Any,
) -> Session:
    """Run `cmd` to its end in a process group of its own and return how it ended.

    A SIGINT or SIGTERM to this process while it runs goes to the child's whole group; the child
    then has `grace_s` seconds to end (a second signal cuts that short) before kill_session. Once
    the child has ended, after a signal, this process exits with 128 + the signal's number unless
    `exit_on_signal` is False (then the caller gets the Session, its `signal` set, and decides).
    `capture_output` and the keyword arguments mean what they mean to subprocess.run/Popen
    (stdout, stderr, text, cwd, env, ...)."""
    if capture_output:
        popen_kwargs["stdout"] = popen_kwargs["stderr"] = subprocess.PIPE
    received: list[int] = []
    deadline: list[float] = []
    proc: subprocess.Popen | None = None

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        if proc is None:
            return  # not started yet: handed on right after it starts
        if len(received) == 1:
            deadline.append(time.monotonic() + grace_s)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, FORWARDED[signal.Signals(signum)])
        else:  # a second signal: no more waiting
            deadline[:] = [time.monotonic()]

    previous = {}
    for sig in FORWARDED:
        with contextlib.suppress(ValueError):  # not the main thread: no handlers, as before
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, forward)
    try:
        proc = subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)
        if received:
            forward(received.pop(), None)
        while True:
            try:
                out, err = proc.communicate(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if deadline and time.monotonic() >= deadline[0]:
                    kill_session(proc)
    finally:
        if proc is not None and proc.poll() is None:  # this process fails: the session goes with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                kill_session(proc)
                proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    first = received[0] if received else None
    if first is not None and exit_on_signal:
        raise SystemExit(128 + first)
    return Session(cmd, proc.returncode, out, err, first)


def figures_of(cmd: list[str], label: str, **run_kwargs: Any) -> dict[str, Any] | None:
    """Run a probe's child to its end (`run_kwargs` as subprocess.run takes them: env, timeout)
    and return the figures it printed as JSON on its last line of stdout; None where it failed,
    after printing `label`, its exit status and the end of its stderr."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **run_kwargs)
    if done.returncode != 0:
        print(f"{label}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])
