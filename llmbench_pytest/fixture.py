"""The `llmbench` fixture: train one configuration for real, record it, check it.

    def test_pretrain(llmbench):
        result = llmbench.train()      # real training; result.json + pytest-benchmark stats
        llmbench.validate(result)      # the seeds' checks, as assertions with the numbers

Every rank runs the same calls. Only rank 0 writes files; every rank gets the same result,
so every rank reaches the same verdict.
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Iterable
from typing import Any

import pytest

from . import checks, recording
from .results import (
    RunPaths,
    RunResult,
    build_result,
    claim_run_paths,
    now_iso,
    placeholder,
    write_json_atomic,
)
from .session import LlmbenchSession
from .spec import RunSpec

log = logging.getLogger("llmbench")


class LlmbenchFixture:
    def __init__(
        self, request: pytest.FixtureRequest, benchmark: Any, session: LlmbenchSession, spec: RunSpec
    ):
        self.request = request
        self.benchmark = benchmark
        self.session = session
        self.spec = spec
        self.paths: RunPaths | None = None
        self.result: RunResult | None = None

    @property
    def writer(self) -> bool:
        return self.session.env.is_writer

    def _meta(self, started: str) -> dict[str, Any]:
        env = self.session.env
        return {
            "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
            "test": self.request.node.nodeid,
            "started_at": started,
            "nodes": env.nnodes,
            "ranks_per_node": env.local_world_size,
            "config": {"session": self.session.options.to_dict()},
        }

    def train(self) -> RunResult:
        """Train this test's configuration; record it; fail the test if the run failed."""
        __tracebackhide__ = True  # a failed run points at the test's line, not at this helper
        from .worker.run import run_benchmark

        ctx = self.session.dist()
        spec = self.spec
        started = now_iso()
        meta = self._meta(started)
        handler = None
        if self.writer:
            self.paths = claim_run_paths(self.session.results_dir, spec)
            self.session.result_paths.append(self.paths.result)
            write_json_atomic(self.paths.result, placeholder(spec, "running", meta))
            handler = logging.FileHandler(self.paths.log)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            log.addHandler(handler)
        log.setLevel(logging.INFO)
        try:
            log.info("%s: %s", self.request.node.nodeid, spec.to_dict())
            measurement = run_benchmark(spec, ctx, log, str(self.request.config.rootpath))
        except BaseException as exc:  # Ctrl-C or SIGTERM: leave a truthful record, then stop
            if self.writer and self.paths is not None:
                meta["finished_at"] = now_iso()
                status = "interrupted" if isinstance(exc, KeyboardInterrupt | SystemExit) else "error"
                write_json_atomic(self.paths.result, placeholder(spec, status, meta, error=repr(exc)))
            raise
        finally:
            if handler is not None:
                log.removeHandler(handler)
                handler.close()
        meta["finished_at"] = now_iso()
        data = build_result(spec, measurement, meta, self.session.options.peak_tflops)
        if self.writer and self.paths is not None:
            write_json_atomic(self.paths.result, data)
        recording.record(self.benchmark, data, str(self.paths.result) if self.paths else None)
        self.session.remember(data)
        self.result = RunResult(data, self.paths)
        if not measurement.ok:
            where = f"\nresult: {self.paths.result}" if self.paths else ""
            pytest.fail(f"{spec.name} {measurement.status}: {measurement.error}{where}")
        return self.result

    def validate(
        self, result: RunResult | None = None, checks_to_run: Iterable[str] = checks.CHECKS
    ) -> list[checks.CheckOutcome]:
        """Run the validation checks, record each in result.json, fail with every failed one.

        memory: peak memory under --llmbench-vram-limit-gb (the device's memory by default).
        step_time_cv: step-time coefficient of variation under --llmbench-max-cv (10%).
        loss_falls: the last third of the measured losses below the first third.
        sharding: model states per rank ZeRO-3 < ZeRO-2 <= ZeRO-1 < DDP and FSDP < DDP, against the
        runs of this session with the same model, shapes and world size.
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
        outcomes = []
        for name in wanted:
            if name == "memory":
                outcomes.append(checks.check_memory(data, opts.vram_limit_gb))
            elif name == "step_time_cv":
                outcomes.append(checks.check_step_time_cv(data, opts.max_cv))
            elif name == "loss_falls":
                outcomes.append(checks.check_loss_falls(data))
            elif name == "sharding":
                outcomes.append(checks.check_sharding(data, self.session.peers(data)))
        data["checks"] = [o.to_dict() for o in outcomes]
        if self.writer and result.paths is not None:
            write_json_atomic(result.paths.result, data)
        self.benchmark.extra_info["checks_failed"] = [o.name for o in outcomes if o.passed is False]
        failed = [o for o in outcomes if o.passed is False]
        if failed:
            raise AssertionError(
                "validation failed:\n" + "\n".join(f"- {o.name}: {o.message}" for o in failed)
            )
        return outcomes
