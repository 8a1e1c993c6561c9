"""The seq2seq workload's dataset as the plugin, the worker and the results see it.

Standard library only: the plugin plans epochs and refuses bad input with it before any torch
is loaded. An epoch plan says how many samples an epoch holds and how many optimizer steps it
takes per rank. A dataset layout says what a disk dataset is: the numbered binary shards
(`shard_0000.bin`, ...) of about `shard_mb` MB, their record format, and the folder name, which
carries a hash of everything that decides the bytes, so that a dataset is reused exactly while
those parameters match and any change writes a new one beside it.

Record format (FORMAT_VERSION 1): one sample is the source then the target, `seq_len` tokens
each, little-endian uint16 (int32 above 65,536 tokens of vocabulary), samples back to back,
`samples_per_shard` per shard (the last shard holds the rest). `manifest.json` describes it and
is written last: a folder without a valid manifest is never read.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from .spec import RunSpec, SpecError

DATA_DIR_NAME = ".llmbench-data"
MANIFEST = "manifest.json"
FAILED_SUFFIX = ".failed"
"""<folder>.failed: the writer could not write the dataset; the message for the waiting ranks."""
FORMAT_VERSION = 1
GENERATOR_VERSION = 1
"""Bump when the way samples are made changes on purpose. The worker also puts a fingerprint of
the first samples into the identity, so an unintended change (worker/data.py's synthetic_batch
is shared with the decoder workloads) names a new dataset too, instead of reusing stale shards."""
DEFAULT_STEPS_PER_EPOCH = 20
"""--llmbench-dataset-samples=0: enough samples for this many optimizer steps per rank."""
MB = 1_000_000  # shard sizes in decimal MB, as result files count GB


def default_data_dir(results_dir: str) -> str:
    """Where disk shards go without --llmbench-data-dir: beside the results, hidden."""
    return os.path.join(results_dir, DATA_DIR_NAME)


@dataclass(frozen=True, slots=True)
class EpochPlan:
    """One epoch of the seq2seq workload on one rank."""

    samples: int
    """Samples in the dataset; one epoch visits each once across the ranks."""
    samples_per_rank: int
    """DistributedSampler's share: ceil(samples / world size), padded so every rank has as many."""
    micro_batches: int
    """Full micro-batches of this rank's share (a partial last batch is dropped)."""
    steps: int
    """Optimizer steps per epoch: micro-batches / gradient accumulation."""


def epoch_plan(dataset_samples: int, batch: int, world_size: int, grad_accum: int) -> EpochPlan:
    """The epoch of `dataset_samples` samples (0: DEFAULT_STEPS_PER_EPOCH steps per rank)."""
    samples = dataset_samples or DEFAULT_STEPS_PER_EPOCH * batch * world_size * grad_accum
    per_rank = math.ceil(samples / world_size)
    micro = per_rank // batch
    steps = micro // grad_accum
    if steps < 1:
        need = batch * world_size * grad_accum
        raise SpecError(
            f"--llmbench-dataset-samples={samples} is less than one optimizer step: per-device batch "
            f"{batch} x world size {world_size} x grad accum {grad_accum} = {need} samples. "
            f"Pass --llmbench-dataset-samples={need} or more, or leave it out for {DEFAULT_STEPS_PER_EPOCH} "
            "steps per epoch."
        )
    return EpochPlan(samples=samples, samples_per_rank=per_rank, micro_batches=micro, steps=steps)


def plan_for(spec: RunSpec) -> EpochPlan:
    return epoch_plan(spec.dataset_samples, spec.per_device_batch, spec.world_size, spec.grad_accum)


def with_epoch_steps(spec: RunSpec) -> RunSpec:
    """An epoch-based spec with its step counts made to match its epochs: the results, checks and
    reports count steps, and an epoch holds as many as the dataset gives each rank."""
    if spec.workload != "seq2seq":
        return spec
    plan = plan_for(spec)
    return spec.replace(steps=plan.steps * spec.epochs, warmup=plan.steps * spec.warmup_epochs)


def check_data_dir(path: str) -> None:
    """Refuse a data directory that cannot be one; a missing one is created when shards are written."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise SpecError(
            f"--llmbench-data-dir {path!r} is a file, not a directory: point it at a directory (it is "
            f"created if missing), e.g. {os.path.join(os.path.dirname(path) or '.', 'data')}."
        )


@dataclass(frozen=True, slots=True)
class DatasetLayout:
    """What decides a disk dataset's bytes and files."""

    vocab_size: int
    seq_len: int
    """Source and target length, each."""
    samples: int
    seed: int
    shard_mb: float
    fingerprint: str = ""
    """A hash of the first samples as this code generates them (worker/seq2seq_data.py)."""

    @property
    def token_dtype(self) -> str:
        return "uint16" if self.vocab_size <= 1 << 16 else "int32"

    @property
    def token_bytes(self) -> int:
        return 2 if self.token_dtype == "uint16" else 4

    @property
    def record_tokens(self) -> int:
        return 2 * self.seq_len

    @property
    def record_bytes(self) -> int:
        return self.record_tokens * self.token_bytes

    @property
    def samples_per_shard(self) -> int:
        return max(1, int(self.shard_mb * MB) // self.record_bytes)

    @property
    def num_shards(self) -> int:
        return math.ceil(self.samples / self.samples_per_shard)

    @property
    def total_bytes(self) -> int:
        return self.samples * self.record_bytes

    def shard_samples(self, index: int) -> int:
        return min(self.samples_per_shard, self.samples - index * self.samples_per_shard)

    def identity(self) -> dict[str, Any]:
        """Everything that decides the files' bytes; its hash names the folder."""
        return {
            "format": FORMAT_VERSION,
            "generator": GENERATOR_VERSION,
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "samples": self.samples,
            "seed": self.seed,
            "token_dtype": self.token_dtype,
            "samples_per_shard": self.samples_per_shard,
            "fingerprint": self.fingerprint,
        }

    @property
    def key(self) -> str:
        text = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def folder_name(self) -> str:
        return f"seq2seq-v{self.vocab_size}-len{self.seq_len}-n{self.samples}-{self.key}"


def shard_name(index: int) -> str:
    return f"shard_{index:04d}.bin"


def manifest(layout: DatasetLayout, **extra: Any) -> dict[str, Any]:
    shards = [
        {
            "file": shard_name(i),
            "samples": layout.shard_samples(i),
            "bytes": layout.shard_samples(i) * layout.record_bytes,
        }
        for i in range(layout.num_shards)
    ]
    return {
        **layout.identity(),
        "key": layout.key,
        "record": "source then target, seq_len tokens each, little-endian",
        "record_bytes": layout.record_bytes,
        "shard_mb": layout.shard_mb,
        "shards": shards,
        **extra,
    }


def manifest_problem(folder: str, layout: DatasetLayout) -> str | None:
    """Why the dataset in `folder` cannot be used for `layout`, or None when it can."""
    if not os.path.isdir(folder):
        return "not written yet"
    found = _read_manifest(os.path.join(folder, MANIFEST))
    if isinstance(found, str):
        return found
    want = layout.identity()
    differs = [k for k in want if found.get(k) != want[k]]
    if differs:
        return f"{MANIFEST} describes another dataset ({', '.join(differs)} differ)"
    for i in range(layout.num_shards):
        size = layout.shard_samples(i) * layout.record_bytes
        try:
            actual = os.path.getsize(os.path.join(folder, shard_name(i)))
        except OSError:
            return f"{shard_name(i)} is missing"
        if actual != size:
            return f"{shard_name(i)} holds {actual} bytes, not {size}"
    return None


def _read_manifest(path: str) -> dict[str, Any] | str:
    """The manifest, or why it cannot be read."""
    try:
        with open(path) as fh:
            found = json.load(fh)
    except FileNotFoundError:
        return f"no {MANIFEST} (never finished writing)"
    except (OSError, json.JSONDecodeError) as exc:
        return f"{MANIFEST} is not readable ({exc})"
    return found if isinstance(found, dict) else f"{MANIFEST} is not a JSON object"
