"""The measured window records Python's garbage collections inside it (worker/gc_pauses.py): a
noisy step time on a host-bound strategy is told apart from a noisy device by these counts."""

from __future__ import annotations

import gc

import pytest

from llmbench_pytest.worker.gc_pauses import GcPauses


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
