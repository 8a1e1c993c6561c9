"""The `llmbench` fixture: train one configuration for real, record it, check it.

    def test_pretrain(llmbench):
        result = llmbench.train()      # real training; result.json + pytest-benchmark stats
        llmbench.validate(result)      # the validation checks, as assertions with the numbers

How the ranks start depends on the session: under torchrun this process is one of them
(in-rank); otherwise each configuration runs as its own torchrun group (launcher) or, with
--llmbench-launch=inprocess, as a one-rank group inside this process. Only rank 0 writes
files; every rank gets the same result, so every rank reaches the same verdict.
"""

from __future__ import annotations

import logging
import shlex
import sys
from typing import TYPE_CHECKING, Any

import pytest

from .. import checks
from ..analysis import peak_model
from ..analysis.stats import mean_of, relative_spread, spread_of
from ..checks.memory import memory_limit
from ..config.datasets import with_epoch_steps
from ..config.presets import tiers
from ..launch import batch_search
from ..launch.launcher import Launch
from ..results import liveness
from ..results.build import build_result, now_iso, placeholder
from ..results.schema import RunResult
from ..results.storage import RunPaths, claim_run_paths, write_json_atomic
from . import recording

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..config.spec import RunSpec
    from ..results.measurement import Measurement
    from .side_by_side import SideBySide
    from .state import LlmbenchSession

log = logging.getLogger("llmbench")
TRIAL_STEPS = 3
"""Measured steps of one batch-search trial: enough for tokens/s, short enough to try many sizes."""


class ForwardProgress(logging.Handler):
    """In-process and in-rank sessions: the run's progress records, to the progress display."""

    def __init__(self, on_progress: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(level=logging.DEBUG)
        self.on_progress = on_progress

    def emit(self, record: logging.LogRecord) -> None:
        progress = getattr(record, "progress", None)
        if progress is not None:
            self.on_progress({"message": record.getMessage(), **progress})


class LlmbenchWarning(UserWarning):
    """Something about a run the user should know that does not fail it (no MFU, throttling)."""


class LlmbenchFixture:
    def __init__(
        self, request: pytest.FixtureRequest, benchmark: Any, session: LlmbenchSession, spec: RunSpec
    ):
        self.request = request
        self.benchmark = benchmark
        self.session = session
        self.spec = spec
        self.result: RunResult | None = None

    @property
    def writer(self) -> bool:
        return self.session.env.is_writer

    def _meta(self) -> dict[str, Any]:
        return run_meta(self.session, self.request.node.nodeid, self.spec)

    def _measure(
        self,
        paths: RunPaths | None,
        meta: dict[str, Any],
        spec: RunSpec,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Measurement:
        """One run of `spec`, by whichever means the session starts ranks; `on_progress` gets rank
        0's progress records (worker/progress.py) as they come."""
        from_rootdir = str(self.request.config.rootpath)
        if self.session.mode == "launcher":
            assert paths is not None
            launch = Launch(run_dir=paths.directory, log_path=paths.log, world_size=spec.world_size)
            try:
                ranks = self.session.ranks()
                return ranks.run(spec, launch, self.session.options.timeout, from_rootdir, on_progress)
            finally:
                meta["launch"] = launch.timings
        from ..worker.run import run_benchmark

        handlers: list[logging.Handler] = []
        if paths is not None:
            to_file = logging.FileHandler(paths.log)
            to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            handlers.append(to_file)
        if on_progress is not None:
            handlers.append(ForwardProgress(on_progress))
        for handler in handlers:
            log.addHandler(handler)
        log.setLevel(logging.INFO)
        try:
            trace_dir = paths.directory if paths is not None else None
            return run_benchmark(spec, self.session.dist(), log, from_rootdir, trace_dir)
        finally:
            for handler in handlers:
                log.removeHandler(handler)
                handler.close()

    def _run_once(self, index: int, count: int, spec: RunSpec | None = None) -> RunResult:
        spec = spec or self.spec
        nodeid = self.request.node.nodeid
        side = self.session.side_by_side
        if side is not None and side.takes(spec):
            paths, meta, measure = self._on_lane(side, nodeid, spec)
        else:
            if side is not None:
                side.clear(self.session.progress)  # this one has the node to itself
            paths, meta = prepare_run(self.session, nodeid, spec, index, count)

            def measure() -> Measurement:
                return self._measure(paths, meta, spec, self.session.progress.on_progress)

        log.info("%s (run %d of %d): %s", nodeid, index, count, spec.to_dict())
        try:
            measurement = measure()
        except BaseException as exc:  # Ctrl-C or SIGTERM: leave a truthful record, then stop
            if side is not None:
                meta["side_by_side"] = side.record(nodeid, spec)
                side.settled.add(nodeid)
            if paths is not None:
                meta.setdefault("finished_at", now_iso())
                status = "interrupted" if isinstance(exc, KeyboardInterrupt | SystemExit) else "error"
                write_json_atomic(paths.result, placeholder(spec, status, meta, error=repr(exc)))
            raise
        meta.setdefault("finished_at", now_iso())
        if side is not None:  # once it ended: every run that trained beside it has started
            meta["side_by_side"] = side.record(nodeid, spec)
        data = build_result(spec, measurement, meta, self.session.options.peak_tflops)
        if paths is not None:
            write_json_atomic(paths.result, data)
        if side is not None:
            side.settled.add(nodeid)
        return RunResult(data, paths)

    def _on_lane(
        self, side: SideBySide, nodeid: str, spec: RunSpec
    ) -> tuple[RunPaths | None, dict[str, Any], Callable[[], Measurement]]:
        """This configuration on a lane of the node (session/side_by_side.py): it may have run
        already, ahead of its test; its paths and metadata were made when it started. The wait
        is the caller's `measure`, where an interrupt leaves its record."""
        job = side.begin(nodeid, spec, self.session.progress)
        job.meta["launch"] = job.launch.timings  # filled as the lane's launcher goes

        def measured() -> Measurement:
            side.wait(job, self.session.progress)
            job.meta["finished_at"] = job.ended_at or now_iso()
            if job.error is not None:
                raise job.error
            assert job.measurement is not None
            return job.measurement

        return job.paths, job.meta, measured

    def train(self) -> RunResult:
        """Train this test's configuration (--llmbench-repeat times); record it; fail if a run failed."""
        __tracebackhide__ = True  # a failed run points at the test's line, not at this helper
        if self.session.refusal:
            pytest.fail(self.session.refusal, pytrace=False)
        nodeid = self.request.node.nodeid
        self.session.progress.config_started(nodeid, self.spec)
        try:
            return self._train()
        finally:
            # before pytest reports the test: the live region must be gone by then
            self.session.progress.config_finished(nodeid, self.result)

    def _train(self) -> RunResult:
        __tracebackhide__ = True
        count = self.session.options.repeat
        spec, search = self.spec, None
        if self.session.options.find_batch:
            search = self._search_batch()
            if search.best_batch is None:
                tried = ", ".join(f"{t.batch}: {t.status} {t.reason}".strip() for t in search.trials)
                pytest.fail(f"{spec.name}: no per-device batch fits (tried {tried})")
            spec = with_epoch_steps(spec.replace(per_device_batch=search.best_batch))
        runs: list[RunResult] = []
        for index in range(1, count + 1):
            run = self._run_once(index, count, spec)
            runs.append(run)
            if run["status"] != "ok":
                break
        result = runs[-1]
        if result["status"] == "unavailable":  # a technique this device or install cannot run
            pytest.skip(f"{spec.name}: {result['error']}")
        if search is not None:
            result.data["batch_search"] = search.to_dict()
            if result.paths is not None:
                write_json_atomic(result.paths.result, result.data)
        if count > 1 and result["status"] == "ok":
            result.data["repeats"] = summarize_repeats(runs)
            if result.paths is not None:
                write_json_atomic(result.paths.result, result.data)
        step_times = [t for run in runs for t in run["step_times_sec"]]
        recording.record(self.benchmark, {**result.data, "step_times_sec": step_times}, _path(result))
        self.session.remember(result.data)
        self.result = result
        if result["device"] == "cuda" and result["mfu"] is None and result["status"] == "ok":
            self.request.node.warn(LlmbenchWarning(f"no MFU for {self.spec.name}: {result['mfu_reason']}"))
        alarming = [r for r in result.get("throttle_reasons") or [] if r != "sw_power_cap"]
        if alarming:  # a power cap is normal for dense training; thermal or hardware slowdown is not
            reasons = ", ".join(alarming)
            self.request.node.warn(
                LlmbenchWarning(f"{self.spec.name}: the GPU slowed itself down ({reasons})")
            )
        if result["status"] != "ok":
            where = f"\nresult: {result.path}" if result.path else ""
            pytest.fail(f"{self.spec.name} {result['status']}: {result['error']}{where}")
        return result

    def memory_limit_gb(self) -> float | None:
        """The memory check's limit: --llmbench-vram-limit-gb, else the tier's that --llmbench-tier
        names; with --llmbench-tier=auto the GPU's own memory (None here: the check reads it from
        the run), and on a CPU the tier auto picked (the process's RSS includes its libraries)."""
        return self._memory_limit()[0]

    def _memory_limit(self) -> tuple[float | None, str]:
        """The limit and where it came from, for the check's message."""
        opts = self.session.options
        tier = tiers().get(self.spec.tier)
        limit = tier.vram_limit_gb if tier is not None else None
        return memory_limit(opts.vram_limit_gb, opts.tier, self.spec.tier, limit, self.spec.device)

    def _search_batch(self) -> batch_search.SearchResult:
        """Short trial runs at several batch sizes; see batch_search.py."""
        opts = self.session.options
        cap = opts.max_batch or (256 if self.spec.device == "cuda" else 16)
        limit, source = self._memory_limit()
        trial_base = self.spec.replace(steps=TRIAL_STEPS, min_steps=0, warmup=1, profile_steps=0, trace=False)
        if self.spec.workload == "seq2seq":
            # an epoch-based trial: a warm-up epoch and a measured one, TRIAL_STEPS steps each,
            # from memory (what fits does not depend on the source; no dataset per trial on disk)
            trial_base = trial_base.replace(epochs=1, warmup_epochs=1, data="memory")

        predictions: dict[int, Any] = {}
        trials: dict[int, batch_search.Trial] = {}

        def try_batch(batch: int) -> batch_search.Trial:
            if batch not in trials:
                trials[batch] = _trial(batch)
            return trials[batch]

        def _trial(batch: int) -> batch_search.Trial:
            spec = trial_base.replace(per_device_batch=batch)
            if spec.workload == "seq2seq":
                spec = with_epoch_steps(spec.replace(dataset_samples=TRIAL_STEPS * spec.samples_per_step))
            paths = None
            if self.writer:
                paths = claim_run_paths(self.session.run_dir / ".batch-search", spec)
            m = self._measure(paths, self._meta(), spec)
            data = build_result(spec, m, {})
            predictions[batch] = data.get("peak_prediction")
            if m.status == "unavailable" and peak_model.UNFIT in (m.error or ""):
                # refused before anything was allocated (worker/run.refuse_unfit): a data point the
                # search goes down from, as from an out-of-memory error, not a reason to skip it
                log.info("batch search %s: batch %d predicted not to fit", spec.name, batch)
                return batch_search.Trial(batch, False, "predicted unfit", None, None, (m.error or "")[:200])
            if m.status == "unavailable":
                pytest.skip(f"{spec.name}: {m.error}")
            if m.status not in ("ok", "oom"):
                raise batch_search.SearchAborted(f"batch {batch}: {m.status}: {m.error}")
            memory = checks.check_memory(data, limit, source)
            fits = m.status == "ok" and memory.passed is not False
            reason = (m.error or "")[:200] if m.status == "oom" else ("" if fits else memory.message)
            log.info("batch search %s: batch %d %s", spec.name, batch, "fits" if fits else "does not fit")
            peak = data["peak_reserved_gb"] if spec.device == "cuda" else data["peak_host_rss_gb"]
            return batch_search.Trial(batch, fits, m.status, data["tokens_per_sec"], peak, reason)

        try:
            found = batch_search.search(try_batch, self._first_batch(try_batch, predictions, limit, cap), cap)
        except batch_search.SearchAborted as exc:
            pytest.fail(f"{self.spec.name}: batch search stopped: {exc}")
        found.trials = [
            trials[b] for b in sorted(trials)
        ]  # the first trial too, where the search began elsewhere
        return found

    def _first_batch(
        self,
        try_batch: Callable[[int], batch_search.Trial],
        predictions: dict[int, Any],
        limit: float | None,
        cap: int,
    ) -> int:
        """On a GPU the search starts where the configured batch's prediction says the largest fitting
        batch is (plan/predict.py), not from an OOM: its first trial, at the configured batch, records
        the prediction, whether it ran or was refused as predicted not to fit (then it costs no
        more than the trace). On a CPU the prediction is a GPU's: it starts at the configured batch."""
        start = self.spec.per_device_batch
        if self.spec.device != "cuda":
            return start
        device = limit is None  # the GPU's own memory: the run must fit on it (analysis/fit.py)
        if device:
            gib = self.session.hardware().device_gib
            limit = gib * 2**30 / 1e9 if gib else None
        # try_batch keeps the trial for the search
        if not limit or try_batch(start).status not in ("ok", "predicted unfit"):
            return start
        hint = peak_model.largest_batch(predictions.get(start), start, limit, device_memory=device)
        return min(hint, cap) if hint else start

    def validate(
        self, result: RunResult | None = None, checks_to_run: Iterable[str] = checks.CHECKS
    ) -> list[checks.CheckOutcome]:
        """Run the validation checks, record each in result.json, fail with every failed one.

        memory: peak memory under --llmbench-vram-limit-gb (the run's tier's limit by default).
        model_states: the model states the census counted within 5% of the strategy's prediction.
        step_time_cv: between runs (repeats' tokens/s, or 5+ epochs' wall times), coefficient of
        variation under --llmbench-max-cv (10%).
        mean_interval: on a GPU, the mean step time known to --llmbench-max-interval (+-10%, 95%).
        loss_falls: the last third of the measured losses below the first third.
        sharding: on a GPU at world size 2+, peak memory in the benchmark card's order (ZeRO and
        FSDP below DDP, FSDP not below ZeRO-3), against this session's runs of the same model and
        shapes.
        scaling: on a GPU, tokens/s against the same configuration at the smallest world size of
        the session, at least --llmbench-min-scaling (60%) of linear.
        repeat_spread: with --llmbench-repeat, every repeat's tokens/s within
        --llmbench-max-repeat-spread (5%) of their mean.
        timing: on a GPU, the per-step CUDA events agree with the host clock around the window (2%).
        """
        __tracebackhide__ = True  # a failed check points at the test's line, not at this helper
        result = result or self.result
        if result is None:
            raise RuntimeError("validate() needs a result: call llmbench.train() first")
        data = result.data
        opts = self.session.options
        wanted = list(checks_to_run)
        unknown = [c for c in wanted if c not in checks.CHECKS]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; choose from {', '.join(checks.CHECKS)}")
        # a timing bound passed on the command line is applied on CPU too (checks/smoke.py)
        given = set(opts.explicit)
        run = {
            "memory": lambda: checks.check_memory(data, *self._memory_limit()),
            "model_states": lambda: checks.check_model_states(data),
            "peak_prediction": lambda: checks.check_peak_prediction(data),
            "step_time_cv": lambda: checks.check_step_time_cv(data, opts.max_cv),
            "mean_interval": lambda: checks.check_mean_interval(
                data, opts.max_interval, explicit="max_interval" in given
            ),
            "loss_falls": lambda: checks.check_loss_falls(data),
            "sharding": lambda: checks.check_sharding(data, self.session.peers(data)),
            "scaling": lambda: checks.check_scaling(
                data, self.session.scaling_baseline(data), opts.min_scaling, explicit="min_scaling" in given
            ),
            "repeat_spread": lambda: checks.check_repeat_spread(data, opts.max_repeat_spread),
            "timing": lambda: checks.check_timing(data),
        }
        outcomes = [run[name]() for name in wanted]
        smoke_verdicts = [o.name for o in outcomes if o.passed is not None and checks.CPU_CAVEAT in o.message]
        if smoke_verdicts:  # in pytest's output whether they passed or failed
            self.request.node.warn(
                LlmbenchWarning(
                    f"{self.spec.name}: {', '.join(smoke_verdicts)} judged on CPU: {checks.CPU_CAVEAT}"
                )
            )
        data["checks"] = [o.to_dict() for o in outcomes]
        if self.writer and result.paths is not None:
            write_json_atomic(result.paths.result, data)
        failed = [o for o in outcomes if o.passed is False]
        self.benchmark.extra_info["checks_failed"] = [o.name for o in failed]
        if failed:
            raise AssertionError(
                "validation failed:\n" + "\n".join(f"- {o.name}: {o.message}" for o in failed)
            )
        return outcomes


def run_meta(session: LlmbenchSession, nodeid: str, spec: RunSpec) -> dict[str, Any]:
    """The session's facts a run's result.json carries (metadata), as the run starts."""
    env, mode = session.env, session.mode
    return {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "test": nodeid,
        "started_at": now_iso(),
        "session": session.session_id,
        "mode": mode,
        "nodes": env.nnodes if mode == "in-rank" else 1,
        "ranks_per_node": env.local_world_size if mode == "in-rank" else spec.world_size,
        "config": {"session": session.options.to_dict()},
        "price": session.options.price,
        "node_shared": session.node_shared(),
    }


def prepare_run(
    session: LlmbenchSession, nodeid: str, spec: RunSpec, index: int = 1, count: int = 1
) -> tuple[RunPaths | None, dict[str, Any]]:
    """A run's metadata, and on the writer its claimed paths with a result.json that says it is
    running (who will finish it: a report tells a run in progress from one a killed session left)."""
    meta = run_meta(session, nodeid, spec)
    meta["repeat"] = {"index": index, "count": count}
    paths = None
    if session.env.is_writer:
        paths = claim_run_paths(session.run_dir, spec)
        session.result_paths.append(paths.result)
        running = placeholder(spec, "running", meta)
        running["metadata"]["session"] = liveness.this_session()
        write_json_atomic(paths.result, running)
    return paths, meta


def settle_ahead(session: LlmbenchSession) -> None:
    """At the session's end: a configuration that ran on a lane but whose test never wrote its
    result (pytest stopped first: -x, an interrupt, a skip decided in the test's setup) keeps a
    truthful result.json. Its checks never ran, so it is not `ok` for a report or a gate:
    `interrupted`, with what it measured where it finished, or the lane's own error."""
    side = session.side_by_side
    if side is None:
        return
    left = side.unsettled()
    if any(not job.done.is_set() for job in left):
        side.close(graceful=False)  # marks what it ends stopped
    for job in left:
        if job.paths is None:
            continue
        job.meta["finished_at"] = job.ended_at or now_iso()
        job.meta["launch"] = job.launch.timings
        job.meta["side_by_side"] = side.record(job.nodeid, job.spec)
        if job.error is not None and not job.stopped:
            data = placeholder(job.spec, "error", job.meta, error=repr(job.error))
        elif job.measurement is not None and not job.stopped:
            data = build_result(job.spec, job.measurement, job.meta, session.options.peak_tflops)
            data["status"] = "interrupted" if data["status"] == "ok" else data["status"]
            data["error"] = data["error"] or (
                "measured on a lane ahead of its test, which never ran (the session stopped first): "
                "no check judged it"
            )
        else:
            data = placeholder(job.spec, "interrupted", job.meta, error="the session stopped it on its lane")
        write_json_atomic(job.paths.result, data)


def _path(result: RunResult) -> str | None:
    return str(result.path) if result.path else None


def summarize_repeats(runs: list[RunResult]) -> dict[str, Any]:
    """Mean and spread of a configuration's repeats (the LoRA fine-tuning guide's node-to-node
    consistency)."""
    rates = [r["tokens_per_sec"] for r in runs]
    steps = [r["mean_step_time_sec"] for r in runs]
    mean = mean_of(rates) or 0.0
    return {
        "count": len(runs),
        "tokens_per_sec": rates,
        "tokens_per_sec_mean": mean,
        "tokens_per_sec_std": spread_of(rates) or 0.0,
        "tokens_per_sec_cv": relative_spread(rates) or 0.0,
        "mean_step_time_sec": steps,
        "mean_step_time_sec_mean": mean_of(steps),
        "mean_step_time_sec_std": spread_of(steps) or 0.0,
        "max_deviation": max(abs(r - mean) for r in rates) / mean,
        # the gate tests memory over repeats too
        "peak_memory_gb": [
            r.get("peak_vram_gb") if r["device"] == "cuda" else r.get("peak_host_rss_gb") for r in runs
        ],
        "results": [_path(r) for r in runs],
    }
