"""Helpers for the plugin's own tests: run the benchmarks the way users do, in subprocesses.

The suite runs in a shuffled order (seeded; the seed is in pytest's header, `--shuffle-seed=N`
replays it) and under pytest-xdist (tools/dev.sh passes `-n`), so no test may depend on another's
leftovers or on running alone. Tests that read one shared session (`shared_bench`, from a
module- or session-scoped fixture) carry `@pytest.mark.xdist_group(<its name>)` so that one worker
trains it once.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _torchrun_rank
import pytest

from llmbench_pytest.config.ranks import RANK_IMPORTS
from llmbench_pytest.launch import forkserver
from llmbench_pytest.worker.ops import extensions_root

REPO = Path(__file__).resolve().parents[1]
# pytester points HOME at a fresh directory per test, and torch would then rebuild DeepSpeed's
# JIT ops (CPU Adam, the shared-memory all-reduce), a minute each, in every test: pin the
# directory a user's sessions use, which `llmbench ops build` (tools/dev.sh setup) fills
TORCH_EXTENSIONS_DIR = str(extensions_root())
# torch's inductor names its cache directory in the environment the first time anything asks for
# it (compiling, tracing a step): whichever test came first would be blamed for changing the
# environment, depending on the order. Named once here, for the whole session and its children.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "llmbench-tests-inductor")
)
# a fresh process reads the step traces an earlier one made (worker/trace_cache.py); pytester's
# fresh HOME per test would hide them from each other, so the whole session and its children
# share one directory (keyed by the code and the libraries: a change traces again)
os.environ.setdefault("LLMBENCH_CACHE_DIR", os.path.join(tempfile.gettempdir(), "llmbench-tests-cache"))
# Python's default: the first process that imports a module leaves its bytecode for the next.
# Where PYTHONDONTWRITEBYTECODE is set (the VM the suite is timed on sets it), every process the suite
# starts compiled llmbench_pytest's modules again, and pytest rewrote their asserts again (it
# rewrites the plugin's whole package): every forked session (the fork server drops the plugin's
# modules so that pytest imports them itself), every rank under torchrun, every tool. Bytecode
# goes where Python puts it by default, __pycache__ folders, which git ignores. Set before the
# workers and this worker's fork server start (both take this environment).
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False
# scikit-learn sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK when it is imported (sklearn/__init__.py),
# and transformers' generation utilities import it where it is installed (the GPU host's image has
# it; found with an audit hook on os.putenv, 1x H100, 2026-11-26): whichever test first built a model
# there was blamed for changing the environment. Imported once here, before any test.
with contextlib.suppress(ImportError):
    import sklearn  # noqa: F401
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# what a child session must not inherit from this one: torchrun's rank variables, pytest-xdist's
# worker identity (the plugin and pytest-benchmark would take the child for an xdist worker) and
# an injected fault a test set for itself
CHILD_UNSET = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR",
    "MASTER_PORT", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
    "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST", "LLMBENCH_INJECT_FAULT",
)  # fmt: skip
FEW_STEPS = ["--llmbench-warmup=1", "--llmbench-steps=3"]
"""A fixed, short measurement, for tests that read what a run records rather than how it measures."""


RUNS = "results/[0-9]*-*"
"""The session folders under a test's directory: each pytest session writes its runs into
results/<started>-<session id>/ (results/latest links to the newest, and is not matched here)."""

GPU_HOST = os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")
"""An NVIDIA driver is installed (whether or not this process may see a GPU)."""
OWN_PROCESS = "LLMBENCH_TEST_OWN_PROCESS"
"""Set in the pytest a test marked own_process_on_gpu runs in: there it runs in-process."""


def saved_results(root: Path) -> list[dict]:
    """The result.json of every run saved under ROOT/results, by every session."""
    return [json.loads(p.read_text()) for p in root.glob(f"{RUNS}/*_results/result.json")]


def runs_by_config(root: Path) -> dict[str, dict]:
    """Saved runs by "<strategy>-ws<N>", for sessions that ran each configuration once."""
    runs = saved_results(root)
    found = {f"{d['strategy']}-ws{d['world_size']}": d for d in runs}
    assert len(found) == len(runs), f"a configuration ran more than once: {sorted(found)}"
    return found


def _gpu_memory_held() -> int:
    """GPU memory NVML counts for this process (a CUDA context), 0 where none or no GPU host."""
    if not GPU_HOST:
        return 0
    from llmbench_pytest.config.nvml import nvml_session
    from llmbench_pytest.session.preflight import query_gpus

    try:
        with nvml_session() as nvml:
            count = nvml.nvmlDeviceGetCount()
        uses = query_gpus([str(i) for i in range(count)])
    except Exception:  # no NVML here: nothing to look at
        return 0
    return sum(p.used_bytes or 1 for u in uses for p in u.processes if p.pid == os.getpid())


@pytest.fixture(autouse=True)
def _leaves_the_process_as_it_found_it():
    """A test that changes this process's environment, CPU affinity, working directory or its
    SIGINT/SIGTERM handlers (which the tools and sessions it starts inherit when ignored) and
    does not undo it changes every later test on its worker: refuse it where it happens. On a GPU
    host, a test that makes a CUDA context in this process (which keeps it until it exits) is
    refused too: every later session's GPU check would find this process holding the GPU."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    before = (dict(os.environ), os.sched_getaffinity(0), os.getcwd())
    held_before = _gpu_memory_held()
    yield
    if not held_before and not os.environ.get(OWN_PROCESS):  # in a pytest of its own it may
        held = _gpu_memory_held()
        assert not held, (
            f"this test made a CUDA context in the suite's process ({held / 2**30:.1f} GiB of the GPU): "
            "mark it own_process_on_gpu, or keep its work on the CPU"
        )
    env, cores, cwd = before
    changed_handlers = [sig.name for sig, h in handlers.items() if signal.getsignal(sig) != h]
    assert not changed_handlers, f"this test left signal handlers changed: {changed_handlers}"
    changed = sorted(k for k in env.keys() | os.environ.keys() if env.get(k) != os.environ.get(k))
    changed = [k for k in changed if k != "PYTEST_CURRENT_TEST"]
    assert not changed, f"this test left environment variables changed: {changed}"
    assert os.sched_getaffinity(0) == cores, "this test left the process's CPU affinity changed"
    assert os.getcwd() == cwd, f"this test left the working directory at {os.getcwd()}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "own_process_on_gpu: on a GPU host the test runs in a pytest of its own (it makes a CUDA "
        "context, which no process can give back)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked own_process_on_gpu runs, on a GPU host, in a new pytest process. A CUDA
    context stays with its process until it exits (about 0.5 GiB, more with what the test
    allocated): in the suite's process it held 1.1 GiB of the GPU, and every later test's session
    was refused by its GPU check (session/preflight.py) as sharing the GPU with another process,
    so those tests depended on their order."""
    marked = pyfuncitem.get_closest_marker("own_process_on_gpu") is not None
    if not GPU_HOST or os.environ.get(OWN_PROCESS) or not marked:
        return None
    env = {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
    env[OWN_PROCESS] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--shuffle-seed=off",
           pyfuncitem.nodeid]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=pyfuncitem.config.rootpath, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        where = " ".join(cmd[1:])
        pytest.fail(f"in its own process ({where}), exit {proc.returncode}:\n{tail}", pytrace=False)
    return True


def _copy_benchmarks(root: Path) -> None:
    (root / "benchmarks").mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "test_pretrain.py", root / "benchmarks" / "test_pretrain.py")


@pytest.fixture
def bench(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory holding the suite's benchmark file, with results under it."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", TORCH_EXTENSIONS_DIR)
    for name in CHILD_UNSET:
        monkeypatch.delenv(name, raising=False)
    _copy_benchmarks(pytester.path)
    if _forks() is not None:
        pytester.runpytest_subprocess = functools.partial(_forked_runpytest, pytester)  # type: ignore[method-assign]
    return pytester


# --- the pytest sessions tests start, forked from one process per worker (the plugin's own fork
# server, llmbench_pytest/launch/forkserver.py): the suite is CPU-bound on two cores and each new
# interpreter imported pytest, torch, transformers and DeepSpeed again. The sessions' launchers
# fork their CPU agents from the same server. LLMBENCH_TEST_FORKSERVER=0 starts each session as a
# new process (whose launcher then starts a server of its own).

PRELOAD = ["pytest", "_pytest.pytester", "torch", "transformers", "llmbench_pytest.worker.agent"]
PRELOAD += RANK_IMPORTS
"""What a session imports on the way to its first run (in-process sessions train in the pytest
process), and what an agent and its ranks import. Not the plugins pytest loads from entry points
(xdist, pytest-benchmark, llmbench): pytest rewrites their asserts when it imports them, and the
server's children drop those that came in anyway (anyio, through transformers)."""

RANK_RELAY = Path(_torchrun_rank.__file__)
"""What torchrun starts as each rank of the tests' in-rank sessions, where sessions are forked: a
stand-in for `python -m pytest` that has the worker's fork server fork it (see torchrun())."""
RANK_THREADS_PLUGIN = '''"""A forked torchrun rank's torch threads (tests/_torchrun_rank.py), from
OMP_NUM_THREADS as a new interpreter reads them when torch loads. PYTEST_DONT_REWRITE: imported
by the fork server, before pytest runs."""
import os


def pytest_configure(config):
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))
'''

_STARTING_ENV = dict(os.environ)
"""This worker's environment before any test changed it: the server's, whichever test starts it."""


@functools.cache
def _forks() -> forkserver.Client | None:
    """This worker's fork server, or None where sessions start as new processes: asked so, or a
    GPU is present (a CUDA context must not cross a fork)."""
    off = os.environ.get("LLMBENCH_TEST_FORKSERVER", "1") == "0"
    if off or GPU_HOST:
        return None
    folder = Path(tempfile.mkdtemp(prefix="llmbench-forks-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    # the server's working directory is first on its path: the plugin a forked torchrun rank
    # loads (tests/_torchrun_rank.py) is imported there once, and its forks find it imported
    (folder / f"{_torchrun_rank.THREADS}.py").write_text(RANK_THREADS_PLUGIN)
    return forkserver.Client.start(folder, [*PRELOAD, _torchrun_rank.THREADS], env=_STARTING_ENV)


def _run_forked(
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    out: Path,
    err: Path,
    timeout: float,
    module: str = "pytest",
) -> int:
    """`python -m MODULE ARGS` forked, its exit status; raises forkserver.Refused where a fork
    would not be a new process, subprocess.TimeoutExpired after killing it past `timeout`. A pytest
    session is given this worker's server to fork its CPU agents from; torchrun's agent is not
    (its ranks get exactly the environment they would get from a new torchrun)."""
    if module == "pytest":
        env = {**env, forkserver.ENV: _forks().path}
    child = _forks().spawn(module, args, cwd, env, out, err)
    try:
        return child.wait(timeout)
    except subprocess.TimeoutExpired:
        forkserver.signal_group(child.pid, signal.SIGKILL)  # as pytester kills a session past its timeout
        raise
    except BaseException:
        # Ctrl-C or an ending worker: the session (its own process session, which the terminal's
        # SIGINT does not reach) ends as the plugin ends on SIGTERM
        forkserver.signal_group(child.pid, signal.SIGTERM)
        raise


def _forked_pytest(args, cwd: Path, env: dict[str, str], out: Path, err: Path, timeout: float | None):
    """pytest ARGS in CWD with ENV, forked where a fork is what a new process would be, else a
    new process: (exit code, stdout lines, stderr lines, seconds)."""
    started = time.monotonic()
    args = [os.fspath(a) for a in args]
    try:
        ret = _run_forked(args, cwd, env, out, err, timeout or 3600.0)
    except forkserver.Refused:
        with out.open("w") as fout, err.open("w") as ferr:
            command = [sys.executable, "-m", "pytest", *args]
            files = {"stdout": fout, "stderr": ferr}
            ret = subprocess.run(command, cwd=cwd, env=env, timeout=timeout, check=False, **files).returncode
    lines = (out.read_text(errors="replace").splitlines(), err.read_text(errors="replace").splitlines())
    return ret, *lines, time.monotonic() - started


def _forked_runpytest(pytester: pytest.Pytester, *args, timeout: float | None = None) -> pytest.RunResult:
    """pytester.runpytest_subprocess, forked: the same arguments (a numbered --basetemp, the -p
    plugins), working directory, environment (the working directory first on PYTHONPATH) and
    output files (stdout, stderr in pytester's directory)."""
    from _pytest.pathlib import make_numbered_dir

    basetemp = make_numbered_dir(root=pytester.path, prefix="runpytest-", mode=0o700)
    args = (f"--basetemp={basetemp}", *args)
    for plugin in pytester.plugins:
        args = ("-p", plugin, *args)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
    try:
        ret, out, err, took = _forked_pytest(
            args, Path.cwd(), env, pytester.path / "stdout", pytester.path / "stderr", timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise pytester.TimeoutExpired(f"{timeout} second timeout expired running: {args}") from exc
    for line in out:
        print(line)
    for line in err:
        print(line, file=sys.stderr)
    with contextlib.suppress(ValueError):
        ret = pytest.ExitCode(ret)
    return pytest.RunResult(ret, out, err, took)


class SharedBench:
    """A directory like `bench`'s that outlives one test: a module- or session-scoped fixture
    trains in it once and several tests read what it wrote. Children run as pytester's do."""

    def __init__(self, path: Path):
        self.path = path
        _copy_benchmarks(path)
        self.env = {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
        self.env["TORCH_EXTENSIONS_DIR"] = TORCH_EXTENSIONS_DIR

    def run(self, *cmd: str, timeout: float = 600, env: dict[str, str] | None = None) -> pytest.RunResult:
        started = time.monotonic()
        done = subprocess.run(
            [str(c) for c in cmd],
            cwd=self.path,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        result = pytest.RunResult(
            done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), time.monotonic() - started
        )
        (self.path / "last-run.log").write_text(done.stdout + done.stderr)  # for a failing test's reader
        return result

    def runpytest_subprocess(
        self, *args: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> pytest.RunResult:
        args = ("-p", "no:cacheprovider", *args)
        if _forks() is None:
            return self.run(sys.executable, "-m", "pytest", *args, timeout=timeout, env=env)
        with tempfile.TemporaryDirectory(prefix="llmbench-session-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            ret, lines, errors, took = _forked_pytest(
                args, self.path, {**self.env, **(env or {})}, out, err, timeout
            )
        (self.path / "last-run.log").write_text("\n".join([*lines, *errors]) + "\n")
        return pytest.RunResult(ret, lines, errors, took)

    def torchrun(
        self, nproc: int, *args: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> pytest.RunResult:
        """`torchrun --standalone --nproc_per_node=N -m pytest ARGS` here (with ENV), its agent and
        ranks forked as torchrun() forks them."""
        argv = ["--standalone", f"--nproc_per_node={nproc}", "-m", "pytest", *args]
        if _forks() is not None:
            with tempfile.TemporaryDirectory(prefix="llmbench-torchrun-") as tmp:
                with contextlib.suppress(forkserver.Refused):
                    result = _torchrun_forked(
                        argv, self.path, {**self.env, **(env or {})}, Path(tmp), timeout
                    )
                    lines = [*result.outlines, *result.errlines]
                    (self.path / "last-run.log").write_text("\n".join(lines) + "\n")
                    return result
        return self.run(*TORCHRUN, *argv, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def shared_bench(tmp_path_factory: pytest.TempPathFactory):
    """shared_bench(name) -> a SharedBench directory of that name (one per name and worker)."""
    return lambda name: SharedBench(tmp_path_factory.mktemp(name, numbered=True))


_TRAINED: dict[str, tuple[SharedBench, pytest.RunResult]] = {}


def trained_once(
    shared_bench, name: str, *args: str, env: dict[str, str] | None = None
) -> tuple[SharedBench, pytest.RunResult]:
    """`pytest ARGS` in the shared directory NAME, run once per test process for every test marked
    xdist_group(NAME), whichever file it is in (a session-scoped fixture defined in one test module
    and imported by another runs once per module)."""
    return ran_once(shared_bench, name, lambda bench: bench.runpytest_subprocess(*args, env=env))


def ran_once(
    shared_bench, name: str, run: Callable[[SharedBench], pytest.RunResult]
) -> tuple[SharedBench, pytest.RunResult]:
    """RUN in the shared directory NAME, once per test process (see trained_once)."""
    if name not in _TRAINED:
        bench = shared_bench(name)
        _TRAINED[name] = (bench, run(bench))
    return _TRAINED[name]


def _ranks_forked(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """torchrun's ARGV and ENV with its ranks' `-m pytest` started as forks of this worker's
    server (tests/_torchrun_rank.py: a rank that imported pytest, torch, transformers and DeepSpeed
    anew cost 4.6 CPU-seconds on the CI machine); unchanged where sessions are not forked."""
    if _forks() is None:
        return argv, env
    at = argv.index("-m")
    assert argv[at + 1] == "pytest", argv
    return [*argv[:at], str(RANK_RELAY), *argv[at + 2 :]], {**env, _torchrun_rank.SERVER: _forks().path}


def torchrun(pytester, nproc: int, *args: str, timeout: float = 600) -> pytest.RunResult:
    """`torchrun --nproc_per_node=N -m pytest ARGS` in the pytester (or shared) directory."""
    argv = ["--standalone", f"--nproc_per_node={nproc}", "-m", "pytest", *args]
    if _forks() is None or not isinstance(pytester, pytest.Pytester):
        return pytester.run(*TORCHRUN, *argv, timeout=timeout)
    # torchrun's agent forked (it imports torch, 1.7 CPU-seconds on the CI machine, for nothing
    # it computes), and its ranks (_ranks_forked). What pytester.run gives it: the working
    # directory first on PYTHONPATH, stdin closed, stdout and stderr into pytester's files
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
    try:
        result = _torchrun_forked(argv, Path.cwd(), env, pytester.path, timeout)
    except forkserver.Refused:
        return pytester.run(*TORCHRUN, *argv, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise pytester.TimeoutExpired(f"{timeout} second timeout expired running: torchrun {argv}") from exc
    for line in result.outlines:
        print(line)
    for line in result.errlines:
        print(line, file=sys.stderr)
    return result


def _torchrun_forked(
    argv: list[str], cwd: Path, env: dict[str, str], into: Path, timeout: float
) -> pytest.RunResult:
    """`torchrun ARGV` in CWD with ENV, its agent and ranks forked (_ranks_forked), its streams
    written to INTO/stdout and INTO/stderr and read back; raises forkserver.Refused where the
    server will not fork, subprocess.TimeoutExpired after killing it past TIMEOUT."""
    forked, env = _ranks_forked(argv, env)
    out, err = into / "stdout", into / "stderr"
    started = time.monotonic()
    ret = _run_forked(forked, cwd, env, out, err, timeout, module=TORCHRUN[2])
    lines, errors = (p.read_text(errors="replace").splitlines() for p in (out, err))
    return pytest.RunResult(ret, lines, errors, time.monotonic() - started)


def start_torchrun(
    argv: list[str], cwd: Path, log: Path, fork_ranks: bool = True
) -> subprocess.Popen | forkserver.Forked:
    """`torchrun ARGV` started in CWD with this process's environment, both its streams (and its
    ranks') appended to LOG: torchrun's agent, and unless FORK_RANKS is false its ranks, forked as
    torchrun() forks them, else new processes. What it returns has pid, poll, wait and returncode."""
    log.write_bytes(b"")
    env = dict(os.environ)
    if fork_ranks:
        argv, env = _ranks_forked(argv, env)
    if _forks() is not None:
        with contextlib.suppress(forkserver.Refused):
            return _forks().spawn(TORCHRUN[2], argv, cwd, env, log, log, append=True)
    with open(log, "ab") as out:
        return subprocess.Popen([*TORCHRUN, *argv], cwd=cwd, env=env, stdout=out, stderr=out)


# --- a shuffled, replayable order (what pytest-randomly does, without entering the user's
# benchmark sessions: installed, pytest-randomly would shuffle their matrix, which runs world
# size first so that ranks stay warm)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shuffle-seed",
        default=os.environ.get("LLMBENCH_TEST_SEED"),
        help="seed of the plugin's own tests' order (default: a new one, printed in the header); "
        "'off' keeps the files' order",
    )


def _seed(config: pytest.Config) -> int | None:
    given = getattr(config, "workerinput", {}).get("shuffle_seed") or config.getoption("shuffle_seed")
    if given == "off":
        return None
    if given is None:
        given = random.SystemRandom().randrange(10**6)
        config.option.shuffle_seed = str(given)
    return int(given)


def pytest_configure_node(node) -> None:  # pytest-xdist: every worker shuffles the same way
    seed = _seed(node.config)
    node.workerinput["shuffle_seed"] = "off" if seed is None else str(seed)


def _order_line(config: pytest.Config) -> str:
    seed = _seed(config)
    if seed is None:
        return "test order: as collected (--shuffle-seed=off)"
    return f"test order: shuffled with seed {seed} (replay: --shuffle-seed={seed})"


def pytest_report_header(config: pytest.Config) -> str:
    return _order_line(config)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    # again at the end, where a failure is read, and under -q, which hides the header
    if not hasattr(config, "workerinput"):
        terminalreporter.write_line(_order_line(config))


def _group_suffix(item: pytest.Item) -> str | None:
    names = sorted(
        {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
    )
    return "@" + "_".join(names) if names else None


def _keep_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-xdist's loadgroup tells the controller a test's group by appending `@group` to its
    node id; from pytest 9.2 on, node ids are structured and that write is lost (pytest-xdist
    issue 1386), so grouped tests were spread over workers and each trained the shared session
    again. Write the suffix where pytest reads it, and refuse to run if neither way took."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        suffix = _group_suffix(item)
        if suffix is None or item.nodeid.endswith(suffix):
            continue
        from _pytest.nodeid import NodeId  # only pytest versions with structured ids lose it

        item._id = NodeId.parse(item.nodeid + suffix)
        if not item.nodeid.endswith(suffix):
            raise pytest.UsageError(
                f"--dist loadgroup cannot group {item.nodeid} with this pytest and pytest-xdist: "
                "run with --dist loadfile"
            )


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook, which writes the suffix
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files in a shuffled order, and each file's tests shuffled within it (as pytest-randomly
    does): a module-scoped fixture is set up once, not again each time its file comes round."""
    _keep_groups(config, items)
    seed = _seed(config)
    if seed is None:
        return
    rng = random.Random(seed)
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    files = list(by_file.values())
    rng.shuffle(files)
    for tests in files:
        rng.shuffle(tests)
    items[:] = [item for tests in files for item in tests]


@pytest.fixture
def prior_for_tiny_gpu_runs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The shipped spreads between sessions, speaking for llama-tiny on the GPUs too: the gate's and
    compare's tests write synthetic GPU runs of llama-tiny in place of the models the prior was
    measured on (analysis/decision_prior.py speaks only for those). Its figures are unchanged."""
    from llmbench_pytest.analysis.decision_prior import PRIOR_FILE

    doc = json.loads(PRIOR_FILE.read_text())
    for device, shapes in doc["shapes"].items():
        if device != "CPU":
            shapes.append(["causal_lm", "llama-tiny", 128, 2])
    path = tmp_path_factory.mktemp("spread") / "decision_spread.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("LLMBENCH_SESSION_SPREAD", str(path))
    return path
