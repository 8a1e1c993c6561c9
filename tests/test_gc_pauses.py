"""The measured window records Python's garbage collections inside it (worker/gc_pauses.py): a
noisy step time on a host-bound strategy is told apart from a noisy device by these counts."""

from __future__ import annotations

import gc

import pytest
import torch

from llmbench_pytest.worker.gc_pauses import GcPauses
from llmbench_pytest.worker.loop import Feed, Window


@pytest.fixture(autouse=True)
def _no_automatic_collections():
    """Only the collections a test asks for: the automatic ones would change its counts."""
    was = gc.isenabled()
    gc.disable()
    yield
    if was:
        gc.enable()


def test_collections_inside_the_window_are_counted_by_generation_with_their_time():
    pauses = GcPauses()
    pauses.start()
    gc.collect(0)
    gc.collect(2)
    gc.collect(2)
    seen = pauses.stop()
    assert seen["collections"] == [1, 0, 2]
    assert 0 < seen["longest_sec"] <= seen["pause_sec"]


def test_collections_after_the_window_are_not_counted():
    pauses = GcPauses()
    pauses.start()
    seen = pauses.stop()
    gc.collect()
    assert pauses.stop() == seen == {"collections": [0, 0, 0], "pause_sec": 0.0, "longest_sec": 0.0}
    assert pauses._observe not in gc.callbacks


def test_a_window_opened_after_a_fresh_ranks_imports_meets_no_full_collection():
    """A fresh rank opens its first window with hundreds of thousands of young survivors (imports,
    the model's build): here 400,000 small lists. The window collects them before it opens, so the
    step's own objects (100,000 more) trigger young collections only."""
    gc.enable()  # the automatic collections are what this test is about
    piled = [[i] for i in range(400_000)]
    window = Window(torch.device("cpu"))
    feed = Feed([], torch.device("cpu"))
    window.open(feed)
    made = [[i] for i in range(100_000)]
    window.close(feed)
    del piled, made
    young, _, full = window.gc_pauses["collections"]
    assert young > 0 and full == 0, window.gc_pauses
