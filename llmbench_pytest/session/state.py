"""Session state the plugin keeps in config.stash: options, rank, the process group, results.

Imports no torch at module level; the process group is made on first use.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..analysis.scaling import mode
from ..checks import peer_key
from ..config.hardware import Hardware, detect, share_node
from ..results.storage import claim_session_dir, session_folder_name
from .progress import Quiet

SESSION_FOLDER_KEY = "llmbench_session_folder"

if TYPE_CHECKING:
    from ..config.options import SessionOptions
    from ..config.ranks import RankEnv
    from ..launch.launcher import RankPool
    from ..worker.dist import DistContext
    from .ops_ahead import AheadBuild
    from .progress import Progress
    from .side_by_side import SideBySide
    from .trace_ahead import AheadTrace


def session_id(config: pytest.Config) -> str:
    """One id per session as the user started it: pytest-xdist's workers share their run's id,
    torchrun's ranks their rendezvous id; otherwise a fresh one."""
    shared = (getattr(config, "workerinput", None) or {}).get("testrunuid")
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if not shared and run_id and run_id != "none":
        shared = run_id
    return hashlib.sha1((shared or uuid.uuid4().hex).encode()).hexdigest()[:8]


class LlmbenchSession:
    def __init__(self, config: pytest.Config, options: SessionOptions, env: RankEnv) -> None:
        self.config = config
        self.options = options
        self.env = env
        self.results_dir = Path(config.invocation_params.dir, options.results_dir)
        self.session_id = session_id(config)
        """Names this pytest session in every result it writes: a report never takes the runs of
        two sessions for repeats of one (report/configs.one_session_each)."""
        self.session_folder = (getattr(config, "workerinput", None) or {}).get(
            SESSION_FOLDER_KEY
        ) or session_folder_name(self.session_id)
        """This session's folder under the results directory (results/storage.py); pytest-xdist's
        workers take their controller's (plugin.pytest_configure_node), so they share one."""
        self._run_dir: Path | None = None
        self._ctx: DistContext | None = None
        self._ranks: RankPool | None = None
        self._peers: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
        self._series: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        """Successful runs by configuration less its world size and batch (scaling baselines)."""
        self.result_paths: list[Path] = []
        self.interrupted = False
        self.raw_settings: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        """(ini, command line) settings as given, for per-test merging with markers."""
        self.summary_lines: list[str] = []
        """Report and gate output for the terminal summary."""
        self.gate_baseline: Path | None = None
        """The saved run --llmbench-gate names, resolved at session start (plugin.py)."""
        self.xdist_worker: tuple[str, int] | None = None
        """(gw<i>, workers) of a pytest-xdist worker that has not claimed its devices yet."""
        self.progress: Progress | Quiet = Quiet()
        """The progress display (session/progress.py), chosen when collection has finished."""
        self.ops_build: AheadBuild | None = None
        """DeepSpeed ops building beside the first configurations (session/ops_ahead.py)."""
        self.trace_ahead: AheadTrace | None = None
        """Peak-prediction traces made while the first ranks start (session/trace_ahead.py)."""
        self.side_by_side: SideBySide | None = None
        """The lanes that run configurations side by side (session/side_by_side.py), if any."""
        self.refusal: str | None = None
        """Why no benchmark may train in this pytest-xdist worker (another process holds its GPUs:
        plugin._look_at_gpus); each fails at once with it."""

    @property
    def run_dir(self) -> Path:
        """Where this session's runs go: results/<started>-<session id>/, created (and linked as
        results/latest) when the first run, op build or report needs it."""
        if self._run_dir is None:
            self._run_dir = claim_session_dir(self.results_dir, self.session_folder)
        return self._run_dir

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def mode(self) -> str:
        """in-rank (under torchrun), launcher (a torchrun group per run) or in-process."""
        if self.env.under_torchrun:
            return "in-rank"
        return "in-process" if self.options.launch == "inprocess" else "launcher"

    def hardware(self) -> Hardware:
        if self.xdist_worker is not None:
            # claimed on first use, when a benchmark is collected: a pytest-xdist session that
            # collects none (the plugin's own tests under -n) pins nothing
            worker, self.xdist_worker = self.xdist_worker, None
            return share_node(*worker, self.options.device)
        return detect(self.options.device, self.env.local_rank)

    def node_shared(self) -> dict[str, Any] | None:
        """Under pytest-xdist: this worker, how many share the node, the devices it owns."""
        share = self.hardware().share
        return share.to_dict() if share is not None else None

    def dist(self) -> DistContext:
        """The session's process group (torchrun's job, or a one-rank group), made once."""
        if self._ctx is None:
            from ..worker import dist

            self._ctx = dist.init(self.env, self.hardware().device, self.options.timeout)
        return self._ctx

    def ranks(self) -> RankPool:
        """Launcher mode's torchrun groups, warm across configurations (made on first use)."""
        if self._ranks is None:
            from ..launch.launcher import RankPool

            self._ranks = RankPool(self.results_dir, isolate=self.options.isolate)
        return self._ranks

    def free_node(self) -> None:
        """The session's own group leaves (lanes take the GPUs next)."""
        if self._ranks is not None:
            self._ranks.close()

    @property
    def dist_started(self) -> bool:
        return self._ctx is not None

    def let_ranks_go(self) -> None:
        """The session ran its last configuration: warm ranks start leaving while the report and
        the summary are written (`shutdown` waits for them)."""
        if self.interrupted:
            return
        if self._ranks is not None:
            self._ranks.let_go()
        if self.side_by_side is not None:
            self.side_by_side.let_go()

    def shutdown(self) -> None:
        """Leave together: torchrun kills the other ranks as soon as one exits with an error,
        so no rank may exit before rank 0 has saved and printed everything. In launcher mode, the
        warm ranks are asked to leave (an interrupted session ends them at once)."""
        if self.side_by_side is not None:
            self.side_by_side.close(graceful=not self.interrupted)
        if self._ranks is not None:
            self._ranks.close(graceful=not self.interrupted)
            self._ranks = None
        if self._ctx is not None:
            from ..worker import dist

            if not self.interrupted:  # an interrupted peer may never arrive
                dist.barrier(self._ctx)
            dist.shutdown(self._ctx)
            self._ctx = None

    def remember(self, result: dict[str, Any]) -> None:
        """Keep successful results for the checks that compare runs: the memory order between
        strategies, and scaling against a smaller world size."""
        if result.get("status") == "ok":
            self._peers.setdefault(peer_key(result), {})[result["strategy"]] = result
            self._series.setdefault(_series_key(result), []).append(result)

    def peers(self, result: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self._peers.get(peer_key(result), {}).items() if k != result["strategy"]}

    def scaling_baseline(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """The same configuration at the smallest world size below this run's that the session
        measured, weak scaling (same per-device batch) before strong (same global batch)."""
        ws = result.get("world_size") or 1
        smaller = [
            r
            for r in self._series.get(_series_key(result), [])
            if (r.get("world_size") or 1) < ws and mode(result, r) is not None
        ]
        if not smaller:
            return None
        return min(smaller, key=lambda r: (r["world_size"], mode(result, r) != "weak"))

    def machine_info(self) -> dict[str, Any]:
        """GPU model, driver and library versions for pytest-benchmark's machine_info."""
        import torch

        from ..worker import env_info

        device = torch.device("cuda" if self.hardware().device == "cuda" else "cpu")
        info = env_info.collect(device, str(self.config.rootpath))
        keep = (
            "device",
            "gpu_name",
            "gpu_count",
            "gpu_memory_gb",
            "driver",
            "torch",
            "cuda",
            "nccl",
            "deepspeed",
            "transformers",
            "llmbench",
        )
        out = {k: info.get(k) for k in keep}
        out["world_size"] = self.world_size
        return out


def _series_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for runs to scale against each other: all but world size and batch."""
    keys = ("strategy", "model", "seq_len", "dtype", "device", "grad_ckpt", "compile", "workload")
    return tuple(result.get(k) for k in (*keys, "optimizer", "lora_rank", "data", "diagnostic"))


SESSION_KEY = pytest.StashKey[LlmbenchSession]()


def get_session(config: pytest.Config) -> LlmbenchSession:
    return config.stash[SESSION_KEY]
