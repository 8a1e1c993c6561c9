"""Look before training: another process on the session's GPUs, and folders the session cannot
write, stop it with one line before anything trains (session/preflight.py, plugin._check_paths).

The GPU look is driven two ways without a GPU: its decision and its wait over data shaped like
NVML's answers, and whole sessions with a stand-in pynvml module (FAKE_PYNVML below) that reports
a GPU another process (a real `sleep`, started here) holds. On this CPU-only machine the real
pynvml finds no GPU, and a session looks at nothing and says nothing about GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FEW_STEPS
from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.config.spec import SpecError
from llmbench_pytest.session import preflight
from llmbench_pytest.session.preflight import GpuProcess, GpuUse

GIB = 2**30
H100 = "NVIDIA H100 80GB HBM3"

FAKE_PYNVML = '''
"""A stand-in for nvidia-ml-py: GPUs and their compute processes from LLMBENCH_FAKE_NVML (JSON);
every query is logged to LLMBENCH_FAKE_NVML_LOG."""
import json, os
from types import SimpleNamespace

def _log(name):
    with open(os.environ["LLMBENCH_FAKE_NVML_LOG"], "a") as fh:
        fh.write(f"{os.getpid()} {name}\\n")

def _gpus():
    return json.loads(os.environ["LLMBENCH_FAKE_NVML"])

def nvmlInit(): _log("nvmlInit")
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return "999.99"
def nvmlDeviceGetCount(): return len(_gpus())
def nvmlDeviceGetHandleByIndex(i): return _gpus()[i]
def nvmlDeviceGetCudaComputeCapability(h): return (9, 0)
def nvmlDeviceGetName(h): return h["name"]
def nvmlDeviceGetMemoryInfo(h):
    return SimpleNamespace(total=h["total"], used=h["used"], free=h["total"] - h["used"])
def nvmlDeviceGetComputeRunningProcesses(h):
    _log("nvmlDeviceGetComputeRunningProcesses")
    return [SimpleNamespace(pid=os.getpid() if p == "self" else p, usedGpuMemory=b) for p, b in h["procs"]]
'''


def gpu(gpu="0", used_gib=0.5, procs=(), total_gib=80):
    return GpuUse(gpu, H100, total_gib * GIB, int(used_gib * GIB), tuple(GpuProcess(*p) for p in procs))


# --- the decision, over NVML-shaped data


def test_another_process_is_named_and_this_session_is_not():
    me, rank, other = 100, 101, 555
    gpus = [
        gpu("0", 41.5, [(me, 1 * GIB), (other, 40 * GIB)]),
        gpu("1", 2.5, [(rank, 2 * GIB)]),  # one of this session's ranks
    ]
    holders = preflight.busy(gpus, ours={me, rank}, command=lambda pid: "python train.py")
    assert [h.line() for h in holders] == ["GPU 0: process 555 (python train.py) holds 40.0 GiB"]


def test_memory_no_listed_process_holds_counts_above_what_an_idle_gpu_shows():
    # an idle GPU: the driver's few hundred MiB; a GPU another container fills: 30 GiB, no process
    idle, full = gpu("0", 0.6), gpu("1", 30.0)
    holders = preflight.busy([idle, full], ours=set())
    assert [h.line() for h in holders] == [
        "GPU 1: 30.0 GiB in use by processes NVML does not name (another container?)"
    ]
    # this session's own context is listed with its memory: it accounts for what is in use
    assert preflight.busy([gpu("0", 30.0, [(7, 29.8 * GIB)])], ours={7}) == []
    # NVML cannot say what a process holds: it is named, and nothing is left to account for
    (h,) = preflight.busy([gpu("0", 30.0, [(9, None)])], ours=set(), command=lambda pid: "")
    assert h.line() == "GPU 0: process 9 holds memory (amount unknown)"


def _once_exec_is_done(pid: int) -> str:
    # Popen returns when the exec can no longer fail, a moment before the kernel sets the new
    # command line; /proc shows it empty until then (seen on a busy 2-core CI machine)
    deadline = time.monotonic() + 60
    while not (command := preflight._command(pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return command


def test_a_process_is_named_by_its_command_on_one_line():
    # measured on an H100: another job started as `python -c "<several lines>"` is named so
    child = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(30)\n"])
    try:
        command = _once_exec_is_done(child.pid)
        # by the program's name, not its path: CI's long venv path once cut the arguments away
        assert command == f"{os.path.basename(sys.executable)} -c import time time.sleep(30)"
    finally:
        child.kill()
        child.wait()
    assert preflight._command(child.pid) == ""  # gone: nothing to name


def test_a_long_command_is_cut_to_one_short_line(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(30)\n# " + "x" * 100])
    try:
        command = _once_exec_is_done(child.pid)
        assert "\n" not in command and len(command) == 60 and command.endswith("...")
        assert "time.sleep(30)" in command
    finally:
        child.kill()
        child.wait()


def test_the_refusal_is_one_line_with_the_gpu_the_process_its_memory_and_the_fixes():
    holders = preflight.busy([gpu("3", 12.0, [(4321, 11.5 * GIB)])], ours=set(), command=lambda pid: "")
    line = preflight.refusal(holders)
    assert "\n" not in line
    assert line.startswith(
        "llmbench: another process holds the GPUs this session would train on: GPU 3: process 4321 "
        "holds 11.5 GiB. "
    )
    assert "CUDA_VISIBLE_DEVICES" in line and "--llmbench-wait-for-gpus=SECONDS" in line
    assert "(still after waiting 60 s)" in preflight.refusal(holders, waited_s=60.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_waiting_polls_until_the_gpus_are_free_and_says_what_it_waits_for():
    answers = [[gpu("0", 40.5, [(555, 40 * GIB)])]] * 3 + [[gpu("0", 0.5)]]
    clock, said = FakeClock(), []
    holders, waited = preflight.wait_for_gpus(
        lambda: answers.pop(0), set, 600, said.append, sleep=clock.sleep, clock=clock
    )
    assert holders == [] and waited == pytest.approx(15.0)  # three polls, 5 s apart
    assert said[0].startswith("llmbench: waiting for the GPUs (0 of 600 s): GPU 0: process 555")
    assert said[-1] == "llmbench: the GPUs are free after 15 s; starting"
    assert len(said) == 2  # nothing changed in between, and less than a minute passed


def test_waiting_gives_up_at_the_limit_and_says_so_every_minute():
    clock, said = FakeClock(), []
    busy_gpu = [gpu("0", 40.5, [(555, 40 * GIB)])]
    holders, waited = preflight.wait_for_gpus(
        lambda: busy_gpu, set, 150, said.append, sleep=clock.sleep, clock=clock
    )
    assert [h.pid for h in holders] == [555] and waited == pytest.approx(150.0)
    assert [s.split(":")[1] for s in said] == [
        " waiting for the GPUs (0 of 150 s)",
        " waiting for the GPUs (60 of 150 s)",
        " waiting for the GPUs (120 of 150 s)",
    ]


def test_without_a_wait_the_gpus_are_asked_once():
    calls, clock = [], FakeClock()

    def query():
        calls.append(1)
        return [gpu("0", 40.5, [(555, 40 * GIB)])]

    holders, waited = preflight.wait_for_gpus(query, set, 0, print, sleep=clock.sleep, clock=clock)
    assert len(holders) == 1 and waited == 0 and len(calls) == 1


def test_this_sessions_processes_are_itself_its_children_and_under_torchrun_its_siblings():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ours = preflight.session_pids(siblings=False)
        assert os.getpid() in ours and child.pid in ours and os.getppid() not in ours and 1 not in ours
        # a rank's siblings are the job's other ranks: everything under its parent (torchrun's agent)
        assert os.getppid() in preflight.session_pids(siblings=True)
    finally:
        child.kill()
        child.wait()


def test_the_wait_option_and_its_ini_twin_parse():
    assert SessionOptions().wait_for_gpus is None
    assert SessionOptions().with_values({"wait_for_gpus": "600"}, "ini").wait_for_gpus == 600.0
    with pytest.raises(SpecError, match=r"--llmbench-wait-for-gpus: must be a number, 0 or more; got '-5'"):
        SessionOptions().with_values({"wait_for_gpus": "-5"}, "command line")


# --- whole sessions, with a stand-in pynvml


@pytest.fixture
def fake_gpu(bench, monkeypatch, tmp_path):
    """A bench whose pynvml reports one H100 on which another process (a real `sleep`) holds
    40 GiB, and this session's own pytest 1 GiB. Returns (the other pid, the query log)."""
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "pynvml.py").write_text(FAKE_PYNVML)
    other = subprocess.Popen(["sleep", "120"])
    log = tmp_path / "nvml.log"
    gpus = [
        {"name": H100, "total": 80 * GIB, "used": 41 * GIB, "procs": [[other.pid, 40 * GIB], ["self", GIB]]}
    ]
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "fake"), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("LLMBENCH_FAKE_NVML", json.dumps(gpus))
    monkeypatch.setenv("LLMBENCH_FAKE_NVML_LOG", str(log))
    yield other.pid, log
    other.kill()
    other.wait()


def test_a_gpu_another_process_holds_stops_the_session_before_anything_trains(bench, fake_gpu):
    other, log = fake_gpu
    result = bench.runpytest_subprocess("benchmarks", "--llmbench-strategies=ddp,zero2", *FEW_STEPS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert errors == [
        f"ERROR: llmbench: another process holds the GPUs this session would train on: GPU 0: process "
        f"{other} (sleep 120) holds 40.0 GiB. Its runs would run out of memory or measure that process's "
        "work as theirs: stop it, pick free GPUs with CUDA_VISIBLE_DEVICES, or wait for them with "
        "--llmbench-wait-for-gpus=SECONDS."
    ]
    assert not (bench.path / "results").exists()  # nothing trained, nothing was written
    assert "nvmlDeviceGetComputeRunningProcesses" in log.read_text()


def test_waiting_for_a_gpu_says_so_then_gives_up_at_the_limit(bench, fake_gpu):
    other, _ = fake_gpu
    started = time.monotonic()
    result = bench.runpytest_subprocess(
        "benchmarks", "--llmbench-strategies=ddp", "--llmbench-wait-for-gpus=2", *FEW_STEPS
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert time.monotonic() - started >= 2
    result.stdout.fnmatch_lines(
        [f"llmbench: waiting for the GPUs (0 of 2 s): GPU 0: process {other} (sleep 120) *"]
    )
    result.stderr.fnmatch_lines(
        [
            "ERROR: llmbench: another process holds the GPUs this session would train on (still after "
            f"waiting 2 s): GPU 0: process {other} *wait longer with --llmbench-wait-for-gpus=SECONDS."
        ]
    )


def test_under_xdist_a_worker_whose_gpu_is_held_fails_its_benchmarks_at_once_with_the_line(
    bench, fake_gpu, monkeypatch
):
    other, _ = fake_gpu
    held = {"name": H100, "total": 80 * GIB, "used": 41 * GIB, "procs": [[other, 40 * GIB]]}
    monkeypatch.setenv("LLMBENCH_FAKE_NVML", json.dumps([held, held]))
    result = bench.runpytest_subprocess(
        "benchmarks", "-n", "2", "--llmbench-strategies=ddp,zero2", *FEW_STEPS
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [f"*llmbench: another process holds the GPUs*: GPU ?: process {other} (sleep 120)*"]
    )
    assert not (bench.path / "results").exists()


def test_on_a_cpu_only_machine_nothing_is_looked_at_and_nothing_is_said(bench):
    if "LLMBENCH_FAKE_NVML" in os.environ:
        pytest.skip("needs the real pynvml")
    started = time.monotonic()
    result = bench.runpytest_subprocess(
        "benchmarks",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-wait-for-gpus=60",
        *FEW_STEPS,
    )
    result.assert_outcomes(passed=1)
    assert time.monotonic() - started < 60
    said = [line for line in result.outlines + result.errlines if "GPU" in line and "llmbench" in line]
    assert said == []  # no wait, no refusal, not even "could not look at the GPUs"


# --- folders the session writes to


@pytest.mark.parametrize(
    ("option", "line"),
    [
        (
            "--llmbench-results-dir=/proc/nope",
            "ERROR: --llmbench-results-dir: results directory '/proc/nope' is not writable (cannot create a "
            "folder in /proc: [Errno 2] No such file or directory): pass --llmbench-results-dir=DIR naming a "
            "folder this user can create and write, or fix its permissions.",
        ),
        (  # the data folder of a session that reads from disk
            "--llmbench-data=disk --llmbench-data-dir=/proc/nope/data",
            "ERROR: --llmbench-data-dir: data directory '/proc/nope/data' is not writable (cannot create a "
            "folder in /proc: [Errno 2] No such file or directory): pass --llmbench-data-dir=DIR naming a "
            "folder this user can create and write, or fix its permissions.",
        ),
        (
            "--llmbench-nvme-path=/proc",
            # as root /proc says ENOENT, to others EACCES
            "ERROR: --llmbench-nvme-path: NVMe directory '/proc' is not writable (cannot write a file in it: "
            "[[]Errno *] *): pass --llmbench-nvme-path=DIR naming a folder this user can create and write, "
            "or fix its permissions.",
        ),
    ],
)
def test_a_folder_the_session_cannot_write_is_one_line_before_the_first_run(bench, option, line):
    result = bench.runpytest_subprocess(
        "benchmarks", "--llmbench-launch=inprocess", *option.split(), *FEW_STEPS
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (bench.path / "results").exists()


def test_a_results_folder_from_the_ini_file_is_named_as_such(bench):
    bench.makeini("[pytest]\nllmbench_results_dir = /proc/nope\n")
    result = bench.runpytest_subprocess("benchmarks", "--llmbench-launch=inprocess", *FEW_STEPS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: llmbench_results_dir (ini file): results directory '/proc/nope' *"])


def test_probing_a_folder_leaves_nothing_behind(tmp_path: Path, bench):
    result = bench.runpytest_subprocess(
        "benchmarks", "--collect-only", "-q", f"--llmbench-results-dir={tmp_path}/new/results"
    )
    assert result.ret == pytest.ExitCode.OK
    assert list(tmp_path.iterdir()) == []
