"""The profiled steps after a window leave nothing of the profiler behind for the next window: on
a GPU a rank asks Kineto to finalize CUPTI when the profiler stops (left subscribed, it slowed a
host-bound step 1.3x on 1x H100), unless the environment already says what to do."""

from __future__ import annotations

import os

from llmbench_pytest.worker.profiling import TEARDOWN_ENV, ask_cupti_teardown


def test_a_gpu_rank_asks_for_cupti_to_be_torn_down(monkeypatch):
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    ask_cupti_teardown("cpu")
    assert TEARDOWN_ENV not in os.environ  # no CUPTI on a CPU: nothing to ask
    ask_cupti_teardown("cuda")
    assert os.environ.get(TEARDOWN_ENV) == "1"
    os.environ.pop(TEARDOWN_ENV)  # monkeypatch puts back what the environment had before


def test_the_users_own_setting_stands(monkeypatch):
    monkeypatch.setenv(TEARDOWN_ENV, "0")
    ask_cupti_teardown("cuda")
    assert os.environ.get(TEARDOWN_ENV) == "0"
