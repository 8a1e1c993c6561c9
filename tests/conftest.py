"""Helpers for the plugin's own tests: run the benchmarks the way users do, in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# pytester points HOME at a fresh directory per test; DeepSpeed's JIT-built CPU ops (CPU Adam,
# the shared-memory all-reduce) would then be rebuilt, a minute each, in every test
TORCH_EXTENSIONS_DIR = os.environ.get(
    "TORCH_EXTENSIONS_DIR", str(Path("~/.cache/torch_extensions").expanduser())
)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def saved_results(root: Path) -> list[dict]:
    """The result.json of every run saved under ROOT/results."""
    return [json.loads(p.read_text()) for p in root.glob("results/*_results/result.json")]


def runs_by_config(root: Path) -> dict[str, dict]:
    """Saved runs by "<strategy>-ws<N>", for sessions that ran each configuration once."""
    runs = saved_results(root)
    found = {f"{d['strategy']}-ws{d['world_size']}": d for d in runs}
    assert len(found) == len(runs), f"a configuration ran more than once: {sorted(found)}"
    return found


@pytest.fixture
def bench(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory holding the suite's benchmark file, with results under it."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", TORCH_EXTENSIONS_DIR)
    monkeypatch.delenv("LLMBENCH_INJECT_FAULT", raising=False)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    (pytester.path / "benchmarks").mkdir()
    shutil.copy(REPO / "benchmarks" / "test_pretrain.py", pytester.path / "benchmarks" / "test_pretrain.py")
    return pytester


def torchrun(pytester: pytest.Pytester, nproc: int, *args: str, timeout: float = 600) -> pytest.RunResult:
    """`torchrun --nproc_per_node=N -m pytest ARGS` in the pytester directory."""
    return pytester.run(
        *TORCHRUN,
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "pytest",
        *args,
        timeout=timeout,
    )
