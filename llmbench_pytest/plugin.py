"""The pytest11 entry point: options, the `llmbench` marker and fixture, rank discipline.

This module imports only the standard library and pytest (tests/test_import_light.py holds it
to that): torch is loaded when a benchmark is collected, never when pytest starts.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from .config import hardware
from .config.bytecode import uncached_bytecode_note
from .config.datasets import DATA_DIR_NAME
from .config.options import BY_NAME, SETTINGS, SessionOptions
from .config.ranks import rank_env
from .config.spec import SpecError
from .launch.matrix import build_matrix, world_sizes
from .results.storage import LATEST
from .session import progress, xdist
from .session.fixture import LlmbenchFixture
from .session.state import SESSION_FOLDER_KEY, SESSION_KEY, LlmbenchSession, get_session

_ERRORS_KEY = pytest.StashKey[dict[str, str]]()
"""Test function node id -> why its settings were refused; raised only if the test is selected."""
_WRONG_MODEL_KEY = pytest.StashKey[dict[str, str]]()
"""Test function node id -> why the session's model cannot train its workload."""
_LLMBENCH_TESTS_KEY = pytest.StashKey[set[str]]()
_SHIPPED_KEY = pytest.StashKey[dict[str, Any]]()
"""In a pytest-xdist worker: the plan, and what was already sent to the controller."""

# Deprecation notices that DeepSpeed and FSDP trigger inside torch on every collective (a
# thousand per session) and that no llmbench user can act on.
_THIRD_PARTY_NOISE = (
    "ignore:`torch.distributed.all_gather_into_tensor` is deprecated:FutureWarning",
    "ignore:`torch.distributed.reduce_scatter_tensor` is deprecated:FutureWarning",
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmbench", "llmbench: distributed LLM training benchmarks")
    for s in SETTINGS:
        dest = "llmbench_" + s.name
        cli_help = s.help.replace("%", "%%")  # argparse formats help text with %
        if s.flag:
            group.addoption(s.option, action="store_true", default=None, dest=dest, help=cli_help)
        else:
            group.addoption(s.option, default=None, dest=dest, metavar=s.metavar, help=cli_help)
        parser.addini(s.ini, help=s.help, default=None)


def _raw_settings(config: pytest.Config) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings given in the ini file and on the command line, unparsed."""
    ini: dict[str, Any] = {}
    cli: dict[str, Any] = {}
    for s in SETTINGS:
        raw_ini = config.getini(s.ini)
        if raw_ini not in (None, "", []):
            ini[s.name] = raw_ini
        raw_cli = config.getoption("llmbench_" + s.name)
        if raw_cli is not None:
            cli[s.name] = raw_cli
    return ini, cli


def options_for(
    ini: dict[str, Any], marker: dict[str, Any] | None, cli: dict[str, Any], origin: str
) -> SessionOptions:
    """Precedence: command line, then the test's marker, then the ini file, then defaults. A marker
    that names a workload keeps it: the workload is what the benchmark is, not a knob."""
    options = SessionOptions().with_values(ini, "ini")
    if marker:
        options = options.with_values(marker, origin)
        if "workload" in marker:
            cli = {k: v for k, v in cli.items() if k != "workload"}
    return options.with_values(cli, "command line")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "llmbench(**settings): override llmbench settings for one benchmark, e.g. "
        "@pytest.mark.llmbench(model='gpt2', strategies='ddp,zero2', seq_lens=[512, 1024]).",
    )
    env = rank_env()
    ini, cli = _raw_settings(config)
    try:
        options = options_for(ini, None, cli, "")
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    if env.under_torchrun and config.getoption("numprocesses", None) not in (None, 0, "0"):
        raise pytest.UsageError(
            "-n (pytest-xdist) cannot run under torchrun: torchrun already starts one pytest per rank "
            "and the ranks must run the same tests in the same order. Drop -n (or pass -n0)."
        )
    for line in _THIRD_PARTY_NOISE:
        config.addinivalue_line("filterwarnings", line)
    if not env.is_writer:
        _no_writes_on_this_rank(config)
    session = LlmbenchSession(config, options, env)
    session.raw_settings = (ini, cli)
    _check_paths(session, options, ini)
    if options.gate:
        session.gate_baseline = _gate_baseline(config, options.gate)
    if xdist.is_worker(config):
        session.xdist_worker = xdist.worker_id(config)  # its slice of the node, claimed on first use
        config.stash[_SHIPPED_KEY] = {}
    elif xdist.is_controller(config):
        session.progress = progress.for_controller(config)
    config.stash[SESSION_KEY] = session
    config.stash[_ERRORS_KEY] = {}
    config.stash[_WRONG_MODEL_KEY] = {}
    config.stash[_LLMBENCH_TESTS_KEY] = set()
    config.pluginmanager.register(_Reporting(config), "llmbench-reporting")
    _sigterm_interrupts(config)


def _check_paths(s: LlmbenchSession, options: SessionOptions, ini: dict[str, Any]) -> None:
    """Every folder the session will write to can be created and written, checked before the first
    run: one line naming the option, the path, the OS error and the fix, not a traceback per test.
    Rank 0 writes the results and the disk data set; every rank writes its NVMe swap files."""
    folders = []
    if s.env.is_writer:
        folders.append(("results_dir", "results directory", s.results_dir, True))
        # the data folder matters to sessions that read from disk; a -k that leaves the disk
        # benchmarks out must not be stopped by it (their markers' disk runs fail with the reason)
        if options.data_dir is not None and "disk" in options.data:
            folders.append(
                ("data_dir", "data directory", Path(s.config.invocation_params.dir, options.data_dir), True)
            )
    if options.nvme_path is not None:
        # the matrix refuses a missing one with its own fix (create it on the NVMe drive)
        nvme = Path(s.config.invocation_params.dir, options.nvme_path)
        folders.append(("nvme_path", "NVMe directory", nvme, False))
    for name, what, path, may_create in folders:
        problem = _not_writable(path, may_create)
        if problem:
            setting = BY_NAME[name]
            given = (
                setting.option
                if name in options.explicit
                else f"{setting.ini} (ini file)"
                if name in ini
                else f"{setting.option} (default)"
            )
            raise pytest.UsageError(
                f"{given}: {what} {str(path)!r} is not writable ({problem}): pass {setting.option}=DIR "
                "naming a folder this user can create and write, or fix its permissions."
            )


def _os_error(exc: OSError) -> str:
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno and exc.strerror else str(exc)


def _not_writable(folder: Path, may_create: bool) -> str | None:
    """Why `folder` cannot take files, or None. A missing folder must be creatable: a probe folder
    is made (and removed) where it would go, which also catches what os.access cannot see as root
    (/proc, a read-only mount). Nothing is left behind: `pytest --help` or a session without
    benchmarks leaves no folder."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if existing != folder and not may_create:
        return None
    try:
        if existing == folder:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".llmbench-write-test-"):
                pass
        else:
            os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".llmbench-write-test-"))
    except OSError as exc:
        where = "write a file in it" if existing == folder else f"create a folder in {existing}"
        return f"cannot {where}: {_os_error(exc)}"
    return None


def _gate_baseline(config: pytest.Config, ref: str) -> Path:
    """Find the saved run --llmbench-gate names before anything trains (a typo must not cost a
    GPU matrix), and before pytest-benchmark autosaves this session's run, which 'latest' would
    otherwise name. Every rank checks, so every rank agrees under torchrun (the storage must be
    visible on every node)."""
    from .report import ReportError
    from .report.gate.settings import check_gate_baseline
    from .session.end import storage_path

    try:
        return check_gate_baseline(ref, storage_path(config))
    except ReportError as exc:
        raise pytest.UsageError(f"--llmbench-gate: {exc}") from None


def _sigterm_interrupts(config: pytest.Config) -> None:
    """SIGTERM (a CI timeout, Slurm's scancel, kubectl delete) stops the session like Ctrl-C does:
    the run in progress is marked interrupted, its workers are ended, finished results stay."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous))


def _no_writes_on_this_rank(config: pytest.Config) -> None:
    """Ranks other than 0 save no benchmark data, junit xml or histograms."""
    opt = config.option
    if hasattr(opt, "benchmark_autosave"):
        opt.benchmark_autosave = False
    for name in (
        "benchmark_save",
        "benchmark_json",
        "benchmark_histogram",
        "benchmark_cprofile_dump",
        "xmlpath",
    ):
        if getattr(opt, name, None):
            setattr(opt, name, None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker per GPU on a GPU host, per core on CPU (None: xdist's own choice)."""
    if rank_env().under_torchrun or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # refused in pytest_configure; or the user's own count, which xdist reads
    try:
        ini, cli = _raw_settings(config)
        return hardware.detect(options_for(ini, None, cli, "").device).devices or None
    except SpecError:
        return None  # pytest_configure refuses the options with the message


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller, per worker it starts: the workers write into the controller's
    session folder (results/<started>-<session id>), one folder for the session the user started."""
    s = node.config.stash.get(SESSION_KEY, None)
    if s is not None:
        node.workerinput[SESSION_FOLDER_KEY] = s.session_folder


class _Reporting:
    """Hooks that need the config: the live progress region is cleared before pytest reports
    anything, and under pytest-xdist the controller gathers what the workers made."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        s = self.config.stash.get(SESSION_KEY, None)
        if s is None:
            return
        if xdist.is_controller(self.config):
            xdist.gather(report, s, self.config, s.progress)
            return
        s.progress.close()
        if report.when == "teardown" or not report.passed:
            s.progress.item_done(report.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self) -> None:
        s = self.config.stash.get(SESSION_KEY, None)
        if s is not None:
            s.progress.close()

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self) -> None:
        self.pytest_keyboard_interrupt()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if xdist.is_worker(config):
        xdist.record_in_worker(config)
    if get_session(config).env.is_writer:
        return
    # other ranks read pytest's cache (so --lf selects the same tests) but never write it
    cache = getattr(config, "cache", None)
    if cache is not None:
        cache.set = lambda key, value: None
    if os.environ.get("LLMBENCH_ALL_RANKS_PRINT") != "1":
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and hasattr(reporter, "_tw"):
            from _pytest.config import create_terminal_writer

            reporter._tw = create_terminal_writer(config, file=open(os.devnull, "w"))


def pytest_report_header(config: pytest.Config) -> list[str]:
    s = get_session(config)
    where = {
        "in-rank": f"rank {s.env.rank} of {s.world_size} (torchrun)",
        "launcher": "a torchrun group per configuration"
        if s.options.isolate
        else "torchrun groups, ranks kept warm per world size",
        "in-process": "world size 1 in this process",
    }[s.mode]
    note = ""
    if s.mode == "in-rank" and s.options.world_sizes:
        note = " (--llmbench-world-sizes is ignored under torchrun: the world size is torchrun's)"
    if xdist.is_controller(config):
        note += _xdist_header(config, s)
    lines = [f"llmbench: {where}; results -> {s.results_dir / s.session_folder}{note}"]
    slow_start = uncached_bytecode_note()
    if slow_start is not None:
        lines.append(f"llmbench: {slow_start}")
    return lines


def _xdist_header(config: pytest.Config, s: LlmbenchSession) -> str:
    workers = config.getoption("numprocesses", None)
    if not isinstance(workers, int) or workers < 1:
        return ""
    try:
        hw = hardware.detect(s.options.device)
    except SpecError:
        return ""
    what = "GPUs" if hw.device == "cuda" else "CPU cores"
    each = hw.devices // workers
    return f"; {workers} pytest-xdist workers share this machine's {hw.devices} {what}, {each} each"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "llmbench" not in metafunc.fixturenames:
        return
    config = metafunc.config
    session = get_session(config)
    options = session.options
    nodeid = metafunc.definition.nodeid
    config.stash[_LLMBENCH_TESTS_KEY].add(nodeid)
    try:
        marker = metafunc.definition.get_closest_marker("llmbench")
        if marker is not None:
            if marker.args:
                raise SpecError(f"@pytest.mark.llmbench takes keyword settings only; got {marker.args!r}")
            origin = f"@pytest.mark.llmbench on {metafunc.definition.nodeid}"
            ini, cli = session.raw_settings
            options = options_for(ini, dict(marker.kwargs), cli, origin)
        if options.workload == "seq2seq":
            # shards live beside the results unless placed elsewhere; ranks may start in another
            # directory (the launcher's), so the path they get is absolute
            where = options.data_dir or str(Path(options.results_dir, DATA_DIR_NAME))
            options = dataclasses.replace(options, data_dir=str(Path(config.invocation_params.dir, where)))
        hw = session.hardware()
        sizes = world_sizes(options, hw, session.mode, session.world_size)
        entries = build_matrix(options, hw, sizes, launched=session.mode == "launcher")
    except SpecError as exc:
        # reported as a usage error after collection if this test is selected (not as a
        # collection traceback, and not when `-k` leaves it out): pytest_collection_finish
        config.stash[_ERRORS_KEY][nodeid] = str(exc)
        metafunc.parametrize("llmbench", [pytest.param(None, id="invalid")], indirect=True)
        return
    if entries and all(e.wrong_model for e in entries):
        config.stash[_WRONG_MODEL_KEY][nodeid] = entries[0].skip or ""
    params = [
        pytest.param(e.spec, id=e.id, marks=[pytest.mark.skip(reason=e.skip)] if e.skip else [])
        for e in entries
    ]
    metafunc.parametrize("llmbench", params, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    """World size first across the benchmark files too, as each benchmark already orders its own
    (launch/matrix.py): the launcher keeps one warm group of ranks per world size, so
    `pytest benchmarks/` then starts one group per world size instead of one per file and world size
    (on 2 GPUs 2 fresh starts instead of 8). Where a world size runs configurations side by side
    (session/side_by_side.py), those that must run alone come last in it, together: the lanes'
    ranks then leave once, not before each of them. Other tests keep their places; ties keep
    collection order."""
    alone_last = _alone_last(config)

    def key(item: Any) -> tuple[int, int]:
        size = _world_size_of(item) or 0
        spec = item.callspec.params["llmbench"]
        return size, int(alone_last(spec)) if spec is not None else 0

    slots = [i for i, item in enumerate(items) if _world_size_of(item) is not None]
    ordered = sorted((items[i] for i in slots), key=key)
    for i, item in zip(slots, ordered, strict=True):
        items[i] = item


def _alone_last(config: pytest.Config) -> Any:
    """A spec -> whether it runs alone at a world size that has lanes (always False off lanes)."""
    s = config.stash.get(SESSION_KEY, None)
    if s is None or not _lanes_possible(config, s):
        return lambda spec: False
    from .launch.lanes import alone_reason, lane_count

    def alone(spec: Any) -> bool:
        size = getattr(spec, "world_size", None)
        if size is None or alone_reason(spec) is None:
            return False
        try:
            hw = s.hardware()  # only once a benchmark is there to order (cached)
        except SpecError:
            return False
        return lane_count(size, hw.device, hw.gpu_count, s.options.side_by_side) > 1

    return alone


def _world_size_of(item: Any) -> int | None:
    """A benchmark item's world size: its RunSpec's, or for one skipped at collection (no spec)
    the `-ws<N>-` of its id."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "llmbench" not in callspec.params:
        return None
    size = getattr(callspec.params["llmbench"], "world_size", None)
    if size is None:
        found = re.search(r"(?:^|-)ws(\d+)(?:-|$)", callspec.id)
        size = int(found.group(1)) if found else None
    return size


def _refusals(config: pytest.Config, items: list[Any]) -> list[str]:
    """The bad settings of the tests that will run (after -k, -m, --deselect, --lf), and the
    session's model where it suits none of the benchmarks that will run."""
    selected = {f"{item.parent.nodeid}::{getattr(item, 'originalname', item.name)}" for item in items}
    refused = config.stash.get(_ERRORS_KEY, {})
    errors = [message for nodeid, message in refused.items() if nodeid in selected]
    benchmarks = selected & config.stash.get(_LLMBENCH_TESTS_KEY, set())
    wrong = config.stash.get(_WRONG_MODEL_KEY, {})
    if benchmarks and benchmarks <= wrong.keys():
        # skipping them all would pass a CI gate that measured nothing
        errors += [wrong[nodeid] for nodeid in sorted(benchmarks)]
    return list(dict.fromkeys(errors))


def pytest_collection_finish(session: pytest.Session) -> None:
    # the final list of items: every plugin's deselection has happened
    errors = _refusals(session.config, session.items)
    if errors:
        raise pytest.UsageError("\n".join(errors))
    s = get_session(session.config)
    _side_by_side(session, s)  # starts nothing: the lanes' GPUs, for the look below
    _look_at_gpus(session, s)  # before any rank starts, and before check_collection's process group
    _build_ops_ahead(session, s)
    _trace_ahead(session, s)
    if s.env.under_torchrun and s.world_size > 1:
        from .session.agreement import check_collection

        try:
            check_collection(s, [item.nodeid for item in session.items])
        except SpecError as exc:  # e.g. more ranks on this node than GPUs
            raise pytest.UsageError(str(exc)) from None
    at_once = s.side_by_side.at_once if s.side_by_side is not None else None
    plan = progress.build_plan(session.items, s.options.repeat, at_once)
    worker = xdist.is_worker(session.config)
    if worker:
        session.config.stash[_SHIPPED_KEY]["plan"] = plan
    writer = s.env.is_writer and not worker  # a worker's terminal is nobody's: the controller shows
    s.progress = progress.for_session(session.config, plan, writer, in_rank=s.mode != "launcher")


def _side_by_side(session: pytest.Session, s: LlmbenchSession) -> None:
    """The session's lanes (session/side_by_side.py), where configurations will share the node: in
    launcher mode, one run per configuration and no batch search, not under pytest-xdist (whose
    workers already divide the node), and only where a world size leaves two lanes or more."""
    config = session.config
    opts = s.options
    if config.option.collectonly or not _lanes_possible(config, s):
        return
    plan = [(item.nodeid, spec) for item, spec in _selected(session) if _will_run(item)]
    if not plan:
        return
    from .config.host_share import usable_cores
    from .launch.launcher import RankPool
    from .session.fixture import prepare_run
    from .session.side_by_side import SideBySide

    hw = s.hardware()
    side = SideBySide(
        plan,
        opts.side_by_side,
        hw.device,
        hardware.visible_gpus(hw.gpu_count) if hw.device == "cuda" else [],
        usable_cores(),
        new_pool=lambda env: RankPool(s.results_dir, isolate=opts.isolate, lane_env=env),
        prepare=lambda nodeid, spec: prepare_run(s, nodeid, spec),
        free_node=s.free_node,
        timeout_s=opts.timeout,
        repo_dir=str(config.rootpath),
    )
    if any(side.lanes_at(spec.world_size) > 1 for _, spec in plan):
        s.side_by_side = side


def _lanes_possible(config: pytest.Config, s: LlmbenchSession) -> bool:
    """Whether this session may run configurations side by side: in launcher mode, not under
    pytest-xdist (whose workers already divide the node), and with one measurement per
    configuration, taken ahead of its test: not with repeats or a batch search (several runs per
    test, each decided by the last)."""
    opts = s.options
    if s.mode != "launcher" or xdist.is_worker(config) or xdist.is_controller(config):
        return False
    return opts.side_by_side != "no" and opts.repeat == 1 and not opts.find_batch


def _will_run(item: Any) -> bool:
    """Whether pytest will call this selected test: no true skipif nor xfail(run=False), as pytest
    decides it (a lane would train it ahead for nothing)."""
    try:
        from _pytest.skipping import evaluate_skip_marks, evaluate_xfail_marks

        xfail = evaluate_xfail_marks(item)
        return evaluate_skip_marks(item) is None and (xfail is None or xfail.run)
    except Exception:  # a condition pytest itself will report: not ahead of it
        return False


def _selected(session: pytest.Session) -> list[tuple[Any, Any]]:
    """(item, RunSpec) of every selected benchmark that will train (not skipped at collection)."""
    return [
        (item, spec)
        for item in session.items
        if "llmbench" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("skip") is None
        and (spec := getattr(getattr(item, "callspec", None), "params", {}).get("llmbench")) is not None
    ]


def _selected_specs(session: pytest.Session) -> list[Any]:
    """The RunSpec of every selected benchmark that will train (not skipped at collection)."""
    return [spec for _, spec in _selected(session)]


def _one_per_machine(config: pytest.Config, s: LlmbenchSession) -> bool:
    """Whether this process starts the session's work beside the ranks (the ops build, the traces
    ahead): one per machine, not for --collect-only, not a pytest-xdist controller, only its first
    worker, under torchrun only local rank 0."""
    if config.option.collectonly or xdist.is_controller(config) or s.env.local_rank != 0:
        return False
    return not xdist.is_worker(config) or xdist.worker_id(config)[0] == "gw0"


def _build_ops_ahead(session: pytest.Session, s: LlmbenchSession) -> None:
    """Start the DeepSpeed op builds the selected configurations need, beside the first ones
    (session/ops_ahead.py): from one process per machine (not a pytest-xdist controller, only the
    first worker, under torchrun only local rank 0)."""
    if not _one_per_machine(session.config, s):
        return
    from .session import ops_ahead

    specs = [spec for spec in _selected_specs(session) if hasattr(spec, "offload")]
    if not specs or s.options.ops_ahead == "no":
        return  # nothing will train: the hardware is not even looked at (a worker claims its cores there)
    device = s.hardware().device
    if not ops_ahead.wanted(s.options.ops_ahead, device):
        return
    names = ops_ahead.needed(specs, device)
    if names:
        s.ops_build = ops_ahead.start(names, device, s.run_dir)


def _trace_ahead(session: pytest.Session, s: LlmbenchSession) -> None:
    """Start tracing the peak predictions' steps while the first ranks start
    (session/trace_ahead.py), from the same one process per machine as the ops build."""
    if not _one_per_machine(session.config, s):
        return
    specs = _selected_specs(session)
    if not specs or s.options.trace_ahead == "no" or s.refusal:
        return  # nothing will train (the preflight refused a worker's GPUs: its benchmarks fail at once)
    from .session import trace_ahead

    if trace_ahead.wanted(s.options.trace_ahead, s.hardware().device):
        s.trace_ahead = trace_ahead.start(specs, s.run_dir)


def _look_at_gpus(session: pytest.Session, s: LlmbenchSession) -> None:
    """Look before training: another process on the GPUs the selected benchmarks will train on
    stops the session with one line, or is waited for (--llmbench-wait-for-gpus). Nothing is
    looked at without a GPU, without a benchmark to train, or for --collect-only."""
    config = session.config
    if config.option.collectonly or xdist.is_controller(config):
        return
    sizes = [getattr(spec, "world_size", 1) for spec in _selected_specs(session)]
    if not sizes or s.hardware().device != "cuda":
        return
    from .config.nvml import NvmlUnavailable
    from .session import preflight

    hw = s.hardware()
    if s.mode == "in-rank":
        ids = preflight.visible_gpus(hw.gpu_count, s.env.local_rank)  # this rank's own GPU
    else:  # launcher groups use the first world-size GPUs, or every lane's; in-process, the first
        side = s.side_by_side
        used = max(n * (side.lanes_at(n) if side is not None else 1) for n in sizes)
        ids = preflight.visible_gpus(min(hw.gpu_count, used if s.mode == "launcher" else 1), None)
    siblings = s.env.under_torchrun or xdist.is_worker(config)  # the job's other ranks, or workers
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    limit = s.options.wait_for_gpus or 0.0
    try:
        holders, waited = preflight.wait_for_gpus(
            lambda: preflight.query_gpus(ids), lambda: preflight.session_pids(siblings), limit, say
        )
    except NvmlUnavailable as exc:
        say(
            f"llmbench: could not look at the GPUs before training ({exc}); "
            "another process there would show as OOMs"
        )
        return
    if holders:
        message = preflight.refusal(holders, waited if limit else None)
        if xdist.is_worker(config):
            # pytest-xdist turns a worker's usage error into an INTERNALERROR without the message:
            # this worker's benchmarks fail at once with it instead (session/fixture.py)
            s.refusal = message
            return
        raise pytest.UsageError(message)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    s = get_session(item.config)
    if s.env.under_torchrun and s.world_size > 1:
        from .session.agreement import agree

        agree(s, report)
    if xdist.is_worker(item.config):
        xdist.ship(item, report, s, item.config.stash[_SHIPPED_KEY])
    return report


@pytest.fixture
def llmbench(request: pytest.FixtureRequest, benchmark: Any) -> LlmbenchFixture:
    """Trains this test's configuration (strategy, world size, sequence length) for real.

    `llmbench.train()` returns the run's result (also written to result.json and recorded in
    pytest-benchmark); `llmbench.validate(result)` runs the validation checks (checks/).
    """
    spec = getattr(request, "param", None)
    if spec is None:
        pytest.fail("the llmbench fixture is parametrised by the llmbench plugin; this test has no run")
    return LlmbenchFixture(request, benchmark, get_session(request.config), spec)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        machine_info["llmbench"] = session.machine_info()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    s = config.stash.get(SESSION_KEY, None)
    if s is None or not s.result_paths:
        return
    terminalreporter.section("llmbench")
    folder = s.results_dir / s.session_folder
    latest = s.results_dir / LATEST
    also = f" (also {latest})" if latest.is_symlink() and latest.resolve() == folder.resolve() else ""
    terminalreporter.write_line(f"{len(s.result_paths)} run(s) recorded under {folder}{also}:")
    for path in s.result_paths:
        terminalreporter.write_line(f"  {path}")
    for line in s.summary_lines:
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    s = session.config.stash.get(SESSION_KEY, None)
    if s is None:
        return
    s.progress.close()
    s.interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    from .session.fixture import settle_ahead

    settle_ahead(s)  # configurations run ahead of tests pytest never reached
    s.let_ranks_go()  # not once interrupted: shutdown then ends the ranks at once
    if s.ops_build is not None:
        s.summary_lines.extend(s.ops_build.finish(interrupted=s.interrupted))
        s.ops_build = None
    if s.trace_ahead is not None:
        s.trace_ahead.finish()
        s.trace_ahead = None
    if s.interrupted:
        return
    if not s.env.is_writer or not s.result_paths or xdist.is_worker(session.config):
        return  # under pytest-xdist the controller reports and gates, over every worker's runs
    from .session import end as session_end

    if s.options.report:
        s.summary_lines.extend(session_end.write_session_report(s))
    if s.options.gate:
        code, lines = session_end.run_session_gate(s, session.config)
        s.summary_lines.extend(lines)
        if code != 0 and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    s = config.stash.get(SESSION_KEY, None)
    if s is not None:
        s.shutdown()
