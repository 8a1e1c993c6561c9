"""Whether every new process here compiles torch's Python source again.

Python reads a module's cached bytecode (__pycache__/*.pyc) when there is one and writes it after
compiling otherwise, unless PYTHONDONTWRITEBYTECODE is set (`python -B`), as many container images
do. Where such an image also ships torch without bytecode (installers that do not compile at
install, uv's default among them), each process compiles torch's modules anew: every fresh rank,
every torchrun agent and the session itself. On 1x H100 (2026-11-26) that was 14.7 s of a first
llama-1b rank's start (docs/results/2026-11-26-h100-pretrain-fresh-host). The session's header
says so with the one command that ends it; this module only looks (no import of the package).
"""

from __future__ import annotations

import importlib.util
import os
import sys


def uncached_bytecode_note(package: str = "torch") -> str | None:
    """One line naming the fix when `package` has no bytecode and this Python writes none, else
    None."""
    if not sys.flags.dont_write_bytecode:
        return None  # the first process that imports a module leaves its bytecode for the next
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        cached = importlib.util.cache_from_source(spec.origin)
    except NotImplementedError:  # no cache at all (sys.implementation.cache_tag is None)
        return None
    if os.path.exists(cached):
        return None
    site = os.path.dirname(os.path.dirname(spec.origin))
    return (
        f"Python compiles {package}'s modules anew in every process here (PYTHONDONTWRITEBYTECODE is "
        f"set and {package} has no bytecode): each fresh rank spends seconds on it. Once, to end it: "
        f"{os.path.basename(sys.executable)} -m compileall -q -j 0 {site}"
    )
