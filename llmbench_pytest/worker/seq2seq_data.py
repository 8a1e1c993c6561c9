"""Runs inside each rank: the encoder-decoder's samples, from memory or from shards on disk.

Both sources hold the same bytes (datasets.py's record format) and reach the model through
the same DataLoader (DistributedSampler, workers, pinned memory on a GPU), so the two paths
differ only in where a record comes from: a tensor in this process, or a read from a shard
file. For the disk path the shards are written once per parameter set (datasets.DatasetLayout
names the folder) and reused; the page cache is dropped before every epoch so each epoch reads
from storage, as a dataset larger than the machine's memory would.

A sample's target is a fixed permutation of its source tokens: an encoder-decoder learns the
mapping through cross-attention within a few steps, so the loss really falls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import itertools
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from ..config import datasets
from .data import synthetic_batch
from .dist import DistContext, all_gather_object

if TYPE_CHECKING:
    import logging
    from collections.abc import Iterator

    from ..config.spec import RunSpec

CHUNK = 256
"""Samples generated per call: the dataset's bytes do not depend on how it is read or written."""


def _target_map(seed: int, vocab_size: int) -> torch.Tensor:
    # the last id is the decoder's start token; the data never uses it
    usable = vocab_size - 1
    g = torch.Generator().manual_seed(seed * 7919 + 17)
    return torch.randperm(usable, generator=g)


def make_samples(layout: datasets.DatasetLayout, start: int, count: int) -> torch.Tensor:
    """Samples start..start+count-1: (count, 2 x seq_len) int64, source then target."""
    mapping = _target_map(layout.seed, layout.vocab_size)
    first, last = start // CHUNK, (start + count - 1) // CHUNK
    chunks = [
        synthetic_batch(layout.seed + 101, c, CHUNK, layout.seq_len, layout.vocab_size - 1)
        for c in range(first, last + 1)
    ]
    source = torch.cat(chunks)[start - first * CHUNK : start - first * CHUNK + count]
    return torch.cat([source, mapping[source]], dim=1)


def _numpy_dtype(layout: datasets.DatasetLayout) -> Any:
    import numpy as np

    return np.dtype("<u2") if layout.token_dtype == "uint16" else np.dtype("<i4")


def fingerprint(layout: datasets.DatasetLayout) -> str:
    """A hash of the first samples as this code makes them: part of the dataset's identity."""
    import hashlib

    probe = dataclasses.replace(layout, samples=min(layout.samples, 4))
    return hashlib.sha256(make_samples(probe, 0, probe.samples).numpy().tobytes()).hexdigest()[:12]


def _set_aside(path: str) -> None:
    """Remove a folder by first renaming it to a name of its own (atomic): a peer on a shared file
    system can then never see it half deleted, nor have its own fresh copy deleted."""
    aside = f"{path}.stale-{socket.gethostname()}-{os.getpid()}"
    try:
        os.rename(path, aside)
    except OSError:
        return  # gone already, or a peer set it aside first
    shutil.rmtree(aside, ignore_errors=True)


def write_shards(layout: datasets.DatasetLayout, folder: str, log: logging.Logger) -> float:
    """Write the dataset into `folder`: into a staging folder of this writer's, renamed into place
    after the manifest, so readers never see half a dataset. Returns the seconds spent."""
    started = time.perf_counter()
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    # unique per writer, also across nodes sharing a file system
    staging = f"{folder}.writing-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        dtype = _numpy_dtype(layout)
        for index in range(layout.num_shards):
            start, count = index * layout.samples_per_shard, layout.shard_samples(index)
            with open(os.path.join(staging, datasets.shard_name(index)), "wb") as fh:
                for offset in range(0, count, 16 * CHUNK):
                    n = min(16 * CHUNK, count - offset)
                    fh.write(make_samples(layout, start + offset, n).numpy().astype(dtype).tobytes())
                    log.debug("writing %s: %d of %d samples", datasets.shard_name(index), offset + n, count)
                fh.flush()
                os.fsync(fh.fileno())
        elapsed = time.perf_counter() - started
        with open(os.path.join(staging, datasets.MANIFEST), "w") as fh:
            json.dump(datasets.manifest(layout, write_sec=round(elapsed, 3)), fh, indent=1)
        if os.path.isdir(folder) and datasets.manifest_problem(folder, layout) is not None:
            _set_aside(folder)  # a stale or broken dataset under this name
        try:
            os.rename(staging, folder)
        except OSError:
            pass  # a peer's valid copy got there first: ours is not needed
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info(
        "wrote %d shard(s), %.1f MB, in %.1f s: %s",
        layout.num_shards,
        layout.total_bytes / 1e6,
        elapsed,
        folder,
    )
    return elapsed


def _wait_for_writer(
    folder: str, layout: datasets.DatasetLayout, since: float, limit_s: float, log: logging.Logger
) -> str | None:
    """On the ranks that do not write: wait until the dataset is there (None), the writer reports
    a failure, or its staging folders stop growing for `limit_s` (the failure's text)."""
    failed = folder + datasets.FAILED_SUFFIX
    last_size, last_change = -1, time.monotonic()
    while True:
        if datasets.manifest_problem(folder, layout) is None:
            return None
        try:
            if os.path.getmtime(failed) >= since:  # an older run's marker does not count
                with open(failed) as fh:
                    return fh.read()
        except OSError:
            pass
        size = sum(os.path.getsize(f) for f in glob.glob(glob.escape(folder) + ".writing-*/*"))
        if size != last_size:
            last_size, last_change = size, time.monotonic()
            log.debug("waiting for the dataset: %.1f MB written so far", size / 1e6)  # heartbeat
        elif time.monotonic() - last_change > limit_s:
            return f"nothing written to {folder} for {limit_s:.0f} s"
        time.sleep(0.5)


def prepare_disk(
    layout: datasets.DatasetLayout, data_dir: str, ctx: DistContext, log: logging.Logger
) -> dict[str, Any]:
    """Make sure the shards exist: the first rank of each node writes them, the others wait for
    it, and then every rank learns whether any of them failed, so all fail together, never hang."""
    folder = os.path.join(data_dir, layout.folder_name)
    since = time.time() - 1.0
    problem = datasets.manifest_problem(folder, layout)
    write_sec, error = None, None
    if problem is not None and ctx.env.local_rank == 0:
        log.info("writing the dataset (%s)", problem)
        try:
            with contextlib.suppress(OSError):
                os.unlink(folder + datasets.FAILED_SUFFIX)
            write_sec = write_shards(layout, folder, log)
        except OSError as exc:
            error = f"rank {ctx.rank} could not write the dataset to {folder}: {exc}"
            with contextlib.suppress(OSError):
                with open(folder + datasets.FAILED_SUFFIX, "w") as fh:
                    fh.write(error)
    elif problem is not None:
        error = _wait_for_writer(folder, layout, since, ctx.timeout_s, log)
    errors = [e for e in all_gather_object(ctx, error) if e]
    if errors:
        raise RuntimeError(errors[0])
    still = datasets.manifest_problem(folder, layout)
    if still is not None:
        raise RuntimeError(f"dataset in {folder} is not usable after writing: {still}")
    return {
        "folder": folder,
        "reused": problem is None,
        "write_sec": write_sec,
        "why_written": problem,
    }


class MemorySamples(Dataset):
    """The dataset as one tensor in this process (shared with forked workers)."""

    def __init__(self, layout: datasets.DatasetLayout) -> None:
        self.data = make_samples(layout, 0, layout.samples).to(torch.int32)

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitems__(self, indices: list[int]) -> torch.Tensor:
        return self.data[torch.as_tensor(indices)].long()

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index].long()


class ShardSamples(Dataset):
    """Records read from the numbered shards with one positioned read each, as a sharded-format
    reader does; file handles open lazily in whichever process (worker) reads."""

    def __init__(self, layout: datasets.DatasetLayout, folder: str) -> None:
        self.layout, self.folder = layout, folder
        self._fds: dict[int, int] = {}
        self._pid = -1
        self.bytes_read = 0

    def __len__(self) -> int:
        return self.layout.samples

    def _fd(self, shard: int) -> int:
        if self._pid != os.getpid():  # a forked worker must not share the parent's offsets
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(shard)
        if fd is None:
            fd = os.open(os.path.join(self.folder, datasets.shard_name(shard)), os.O_RDONLY)
            self._fds[shard] = fd
        return fd

    def _read(self, index: int) -> bytes:
        per, size = self.layout.samples_per_shard, self.layout.record_bytes
        shard, row = divmod(index, per)
        data = os.pread(self._fd(shard), size, row * size)
        if len(data) != size:
            raise RuntimeError(f"{datasets.shard_name(shard)} in {self.folder} is truncated at sample {row}")
        return data

    def __getitems__(self, indices: list[int]) -> torch.Tensor:
        import numpy as np

        raw = b"".join(self._read(i) for i in indices)
        tokens = np.frombuffer(raw, dtype=_numpy_dtype(self.layout)).astype(np.int64)
        return torch.from_numpy(tokens).view(len(indices), self.layout.record_tokens)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.__getitems__([index])[0]

    def drop_page_cache(self) -> bool:
        """Ask the kernel to forget the shards' cached pages (POSIX_FADV_DONTNEED); False where the
        call fails. It is a request: network file systems and tmpfs may keep the pages anyway."""
        if not hasattr(os, "posix_fadvise"):
            return False
        for shard in range(self.layout.num_shards):
            fd = os.open(os.path.join(self.folder, datasets.shard_name(shard)), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                return False
            finally:
                os.close(fd)
        return True


class EpochSampler(Sampler[int]):
    """This rank's share of an epoch (DistributedSampler: shuffled per epoch, the same order on
    every rank), cut to the samples the epoch's steps use. The loader's workers then have nothing
    left to read when the epoch's last step takes its batch, so no read of one epoch lands after
    the next epoch's page-cache drop."""

    def __init__(self, inner: DistributedSampler, count: int) -> None:
        self.inner, self.count = inner, count

    def set_epoch(self, epoch: int) -> None:
        self.inner.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.inner), self.count)

    def __len__(self) -> int:
        return self.count


def whole_batch(batch: torch.Tensor) -> torch.Tensor:
    """collate_fn: __getitems__ already returns the stacked batch."""
    return batch


@dataclass
class EpochData:
    """One rank's view of the dataset, an epoch at a time."""

    loader: DataLoader
    sampler: EpochSampler
    plan: datasets.EpochPlan
    dataset: Dataset
    info: dict[str, Any] = field(default_factory=dict)
    """What result.json records about the data: source, size, shards, reuse, workers."""

    def epoch(self, index: int) -> Iterator[torch.Tensor]:
        """This rank's micro-batches of epoch `index` (reshuffled per epoch, same on every rank)."""
        self.sampler.set_epoch(index)
        if isinstance(self.dataset, ShardSamples):
            self.info["page_cache_drop_requested"] = self.dataset.drop_page_cache()
        return iter(self.loader)


def make_epoch_data(spec: RunSpec, vocab_size: int, ctx: DistContext, log: logging.Logger) -> EpochData:
    plan = datasets.plan_for(spec)
    layout = datasets.DatasetLayout(
        vocab_size=vocab_size,
        seq_len=spec.seq_len,
        samples=plan.samples,
        seed=spec.seed,
        shard_mb=spec.shard_mb,
    )
    layout = dataclasses.replace(layout, fingerprint=fingerprint(layout))
    info: dict[str, Any] = {
        "source": spec.data,
        "samples": plan.samples,
        "bytes": layout.total_bytes,
        "record_bytes": layout.record_bytes,
        "token_dtype": layout.token_dtype,
        "steps_per_epoch": plan.steps,
        "workers": spec.data_workers,
        "pin_memory": ctx.device.type == "cuda",
    }
    dataset: Dataset
    if spec.data == "disk":
        # the plugin fills data_dir in (the results folder's .llmbench-data unless given)
        data_dir = spec.data_dir or datasets.default_data_dir("results")
        info.update(prepare_disk(layout, data_dir, ctx, log))
        info.update(shards=layout.num_shards, shard_mb=spec.shard_mb)
        dataset = ShardSamples(layout, info["folder"])
    else:
        dataset = MemorySamples(layout)
    shuffled = DistributedSampler(
        dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=spec.seed
    )
    sampler = EpochSampler(shuffled, plan.steps * spec.grad_accum * spec.per_device_batch)
    loader = DataLoader(
        dataset,
        batch_size=spec.per_device_batch,
        sampler=sampler,
        drop_last=True,
        num_workers=spec.data_workers,
        pin_memory=ctx.device.type == "cuda",
        persistent_workers=spec.data_workers > 0,
        collate_fn=whole_batch,
    )
    return EpochData(loader=loader, sampler=sampler, plan=plan, dataset=dataset, info=info)
