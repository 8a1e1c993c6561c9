"""Between configurations a warm rank freezes what it holds out of the collector's view
(worker/live_objects.py), so that a run's collections walk only what it created. The memory census
must still see every live tensor, and garbage among the frozen objects must not pass for a leftover."""

from __future__ import annotations

import gc

import pytest
import torch

from llmbench_pytest.worker import live_objects
from llmbench_pytest.worker.memory import LEFTOVER_LIMIT_BYTES, FreshLevel, census_bytes, leftover


@pytest.fixture(autouse=True)
def _thawed():
    """This test process's objects go back where the collector sees them, whatever the test did."""
    gc.collect()
    yield
    live_objects.thaw()


def test_the_census_counts_a_frozen_tensor_while_it_lives():
    before = census_bytes().get("cpu", 0)
    held = torch.zeros(1 << 20, dtype=torch.uint8)  # 1 MiB
    live_objects.settle()
    assert not any(obj is held for obj in gc.get_objects())  # frozen: out of the collector's view
    assert census_bytes().get("cpu", 0) == before + (1 << 20)
    del held
    assert census_bytes().get("cpu", 0) == before


def test_a_run_after_settling_walks_only_what_it_created():
    live_objects.settle()
    assert len(gc.get_objects()) < 10_000  # this process holds hundreds of thousands
    made = [torch.ones(4) for _ in range(3)]
    young = {id(t) for t in live_objects.live_tensors()}
    assert {id(t) for t in made} <= young


def test_garbage_among_frozen_objects_is_collected_before_a_leftover_is_reported():
    fresh = FreshLevel(census_bytes().get("cpu", 0), {id(t) for t in live_objects.live_tensors()})
    cycle: dict = {"tensor": torch.zeros(LEFTOVER_LIMIT_BYTES + (8 << 20), dtype=torch.uint8)}
    cycle["self"] = cycle  # only the collector can free it
    live_objects.settle()
    del cycle  # garbage now, but frozen: no young collection reaches it
    gc.collect()
    left = leftover(torch.device("cpu"), fresh)
    assert left["bytes"] < LEFTOVER_LIMIT_BYTES and not left["tensors"], left


def test_a_leftover_that_is_held_is_still_reported_after_settling():
    fresh = FreshLevel(census_bytes().get("cpu", 0), {id(t) for t in live_objects.live_tensors()})
    kept = [torch.zeros(LEFTOVER_LIMIT_BYTES + (8 << 20), dtype=torch.uint8)]
    live_objects.settle()
    left = leftover(torch.device("cpu"), fresh)
    assert left["bytes"] >= LEFTOVER_LIMIT_BYTES + (8 << 20)
    assert any("72.0 MiB" in t for t in left["tensors"]), left
    del kept
