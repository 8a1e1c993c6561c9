"""--llmbench-find-batch: the largest per-device batch that fits, and the fastest one.

Standard library only; the fixture supplies `try_batch`, which trains a short trial run at one
batch size (its own torchrun group in launcher mode, so an out-of-memory trial cannot leave
anything behind; in-process and in-rank, the run's memory is released before the next). From the
configured batch the search doubles while trials fit (halves while they do not), then bisects
between the last batch that fit and the first that did not. A trial fits when it finished and its
peak memory is under the limit the memory check uses; an out-of-memory error is a data point, not
a failure. The fastest batch is the fitting trial with the highest tokens/s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


class SearchAborted(RuntimeError):
    """A trial failed for a reason other than memory: the search cannot tell what fits."""


@dataclass(frozen=True)
class Trial:
    batch: int
    fits: bool
    status: str
    tokens_per_sec: float | None = None
    peak_gb: float | None = None
    reason: str = ""


@dataclass
class SearchResult:
    trials: list[Trial] = field(default_factory=list)
    max_fitting_batch: int | None = None
    best_batch: int | None = None
    best_tokens_per_sec: float | None = None
    capped: bool = False
    """The largest batch tried still fit: the true limit is above --llmbench-max-batch."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def search(try_batch: Callable[[int], Trial], start: int, max_batch: int) -> SearchResult:
    tried: dict[int, Trial] = {}

    def fits(batch: int) -> bool:
        if batch not in tried:
            tried[batch] = try_batch(batch)
        return tried[batch].fits

    batch = min(max(1, start), max_batch)
    lo: int | None = None
    hi: int | None = None
    if fits(batch):
        lo = batch
        while batch * 2 <= max_batch:
            batch *= 2
            if not fits(batch):
                hi = batch
                break
            lo = batch
    else:
        hi = batch
        while batch > 1:
            batch //= 2
            if fits(batch):
                lo = batch
                break
            hi = batch
    if lo is not None and hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
    result = SearchResult(trials=[tried[b] for b in sorted(tried)], max_fitting_batch=lo)
    fitting = [t for t in result.trials if t.fits and t.tokens_per_sec]
    if fitting:
        best = max(fitting, key=lambda t: t.tokens_per_sec or 0.0)
        result.best_batch, result.best_tokens_per_sec = best.batch, best.tokens_per_sec
    result.capped = lo is not None and hi is None and lo * 2 > max_batch
    return result
