"""DeepSpeed's JIT-built ops (issue 14): built once per machine, timed apart from the run, and a
build lock left by a killed build no longer makes every later DeepSpeed run wait forever."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CHILD_UNSET, FEW_STEPS, RUNS, TORCH_EXTENSIONS_DIR, saved_results
from llmbench_pytest.worker.ops import baton_holders, clear_stale_baton


def test_a_lock_nobody_holds_is_removed_and_a_held_one_is_left(tmp_path, caplog):
    lock = tmp_path / "lock"
    lock.write_text("")
    log = logging.getLogger("llmbench.test")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import time; f = open({str(lock)!r}); print('open', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"open"
        assert baton_holders(lock) == [holder.pid]
        assert clear_stale_baton(lock, log, settle_s=0.1) is False  # a live build: waited for, not broken
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()
    with caplog.at_level(logging.WARNING, logger="llmbench.test"):
        assert clear_stale_baton(lock, log, settle_s=0.1) is True
    assert not lock.exists()
    assert (
        "removed a stale DeepSpeed build lock" in caplog.text and "a build was killed midway" in caplog.text
    )
    assert clear_stale_baton(lock, log, settle_s=0.1) is False  # nothing left to remove


def test_a_deepspeed_run_goes_on_past_a_stale_build_lock(bench, monkeypatch, tmp_path):
    # a private copy of the built ops, so the planted lock cannot stall anyone else's runs
    ops = tmp_path / "torch_extensions"
    source = Path(TORCH_EXTENSIONS_DIR) / "deepspeed_shm_comm"
    if source.is_dir():
        shutil.copytree(
            source, ops / "deepspeed_shm_comm", symlinks=True, ignore=shutil.ignore_patterns("lock")
        )
    (ops / "deepspeed_shm_comm").mkdir(parents=True, exist_ok=True)
    lock = ops / "deepspeed_shm_comm" / "lock"
    lock.write_text("")  # what a rank killed mid-build leaves behind: no process holds it
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ops))
    result = bench.runpytest_subprocess(
        "benchmarks",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=zero0",
        *FEW_STEPS,
        "--llmbench-timeout=900",
        timeout=900,
    )
    result.assert_outcomes(passed=1)
    (run,) = saved_results(bench.path)
    timing = run["timing"]
    op = timing["ops"]["deepspeed_shm_comm"]
    assert op["dir"] == str(ops / "deepspeed_shm_comm") and op["sec"] > 0
    assert timing["setup_phases"]["ops_sec"] >= op["sec"]
    # the op's build (or load) is not part of the run's setup
    assert timing["setup_sec"] == sum(
        timing["setup_phases"][k] for k in ("build_sec", "wrap_sec", "data_sec", "probe_sec")
    )
    log = next(bench.path.glob(f"{RUNS}/*zero0*.log")).read_text()
    assert "removed a stale DeepSpeed build lock" in log, log[-2000:]


def test_an_op_is_loaded_with_the_environments_ninja_whatever_path_finds_first(tmp_path):
    # a ninja of another version first on PATH (a system one, where the environment is not
    # activated) takes every op the environment's ninja built for changed and compiles it again
    stray = tmp_path / "bin"
    stray.mkdir()
    called = tmp_path / "stray-ninja-called"
    (stray / "ninja").write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
    (stray / "ninja").chmod(0o755)
    load = (
        "import logging, os; "
        "os.environ['DS_ACCELERATOR'] = 'cpu'; "
        "from deepspeed.accelerator import get_accelerator; "
        "from llmbench_pytest.worker.ops import extensions_root, load_op; "
        "builder = get_accelerator().create_op_builder('ShareMemCommBuilder'); "
        "load_op(builder, extensions_root() / builder.NAME, logging.getLogger('t'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
    env |= {"TORCH_EXTENSIONS_DIR": TORCH_EXTENSIONS_DIR, "PATH": f"{stray}{os.pathsep}{env['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-c", load], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not called.exists(), f"the ninja first on PATH ran: {called.read_text()}"


def test_deepspeed_asks_py_cpuinfo_once_per_process(monkeypatch, tmp_path):
    """CPU Adam's compiler flags ask py-cpuinfo twice per load, the optimizer once more per run,
    and each answer is a Python process of its own (1.1 s apiece on a GPU host): one is kept."""
    import cpuinfo
    from deepspeed.accelerator import get_accelerator

    from llmbench_pytest.worker.ops import ask_cpuinfo_once

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # no answer kept for this machine yet
    asked = []
    real = cpuinfo.get_cpu_info
    # py-cpuinfo's own function, counted; monkeypatch puts it back after the test
    monkeypatch.setattr(cpuinfo, "get_cpu_info", lambda: asked.append(1) or real())
    builder = get_accelerator().create_op_builder("CPUAdamBuilder")
    builder.cxx_args()
    assert len(asked) >= 2  # unpatched, every question starts py-cpuinfo's process again
    asked.clear()
    ask_cpuinfo_once()
    ask_cpuinfo_once()  # a second run in the same rank keeps the first answer, not a wrapper of it
    flags = builder.cxx_args()
    assert builder.cxx_args() == flags and len(asked) == 1
    first = cpuinfo.get_cpu_info()
    first["brand_raw"] = "changed by a caller"
    assert cpuinfo.get_cpu_info()["brand_raw"] != "changed by a caller" and len(asked) == 1


def test_a_later_process_reads_the_machines_cpuinfo_answer(monkeypatch, tmp_path):
    """The ops built ahead ask py-cpuinfo at the session's start; a rank started later on the same
    machine reads that answer from the extensions folder instead of starting py-cpuinfo's process
    again (1.1 s of the first offload configuration on 1x H100)."""
    import cpuinfo

    from llmbench_pytest.worker.ops import ask_cpuinfo_once, cpuinfo_file

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    path = cpuinfo_file()
    if path is None:
        pytest.skip("no kernel boot id on this machine: nothing is kept")
    asked = []
    real = cpuinfo.get_cpu_info
    answer = real()

    def counted():
        asked.append(1)
        return dict(answer)

    # the first process (the ops ahead): asks, and keeps the answer
    monkeypatch.setattr(cpuinfo, "get_cpu_info", counted)
    ask_cpuinfo_once()
    assert cpuinfo.get_cpu_info()["brand_raw"] == answer["brand_raw"] and len(asked) == 1
    assert path.is_file() and path.parent == tmp_path
    # a later process on the machine: py-cpuinfo's own function again, nothing asked
    monkeypatch.setattr(cpuinfo, "get_cpu_info", counted)
    ask_cpuinfo_once()
    assert cpuinfo.get_cpu_info()["brand_raw"] == answer["brand_raw"] and len(asked) == 1
    # an unreadable file is asked again, not trusted
    path.write_text("{not json")
    monkeypatch.setattr(cpuinfo, "get_cpu_info", counted)
    ask_cpuinfo_once()
    assert cpuinfo.get_cpu_info()["brand_raw"] == answer["brand_raw"] and len(asked) == 2
