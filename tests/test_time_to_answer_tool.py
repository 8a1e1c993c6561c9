"""tools/time_to_answer.py: the wall time of a session, its measured share, where each configuration's
time went, and whether the goals were met (issue 14 measures its goals with it)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from conftest import REPO


def _tool():
    spec = importlib.util.spec_from_file_location("time_to_answer", REPO / "tools" / "time_to_answer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(folder, name, window, total, ranks="warm", left=None, when=0, opened=None, lane=None):
    run = folder / f"bench-h-{name}-ws1-seq128_results"
    run.mkdir(parents=True)
    data = {
        "strategy": name,
        "world_size": 1,
        "status": "ok",
        "leftover_after_run": left,
        "steps": 12,
        "metadata": {"test": f"t[{name}]"},
        "side_by_side": lane,
        "timing": {
            "window_sec": window,
            "window_started_at_unix": opened,
            "setup_sec": 1.0,
            "setup_phases": {
                "import_sec": 1.5,
                "predict_sec": 0.75,
                "ops_sec": 0.5,
                "warmup_sec": 0.5,
                "after_window_sec": 0.25,
            },
            "ops": {"cpu_adam": {"sec": 0.01, "compiled": True}},
            "measurement": {"stopped": "cap", "precision": 0.05},
            "launch": {"ranks": ranks, "to_first_progress_sec": 0.25, "total_sec": total},
        },
    }
    (run / "result.json").write_text(json.dumps(data))
    os.utime(run / "result.json", (1e9 + when, 1e9 + when))  # the tool orders runs by these times


def test_it_times_the_command_and_accounts_for_each_configuration(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "res"
    _result(results, "ddp", window=0.02, total=5.0)
    _result(results, "zero2", window=0.03, total=6.0)
    tool = _tool()
    sleep = [sys.executable, "-c", "import time; time.sleep(0.2)"]
    code = tool.main(["--json", "out.json", "--goal-wall", "60", "--goal-share", "0.99", "--", *sleep,
                      f"--llmbench-results-dir={results}"])  # fmt: skip
    figures = json.loads((tmp_path / "out.json").read_text())
    assert code == 1 and figures["goals_missed"] == ["share"]  # 0.05 s of windows in 0.2 s or more
    assert figures["measuring_sec"] == pytest.approx(0.05) and figures["configurations"] == 2
    assert 0.2 <= figures["wall_sec"] < 30 and figures["ops_compiled_sec"] == pytest.approx(0.02)
    (ddp,) = [r for r in figures["rows"] if r["name"] == "ddp-ws1"]
    assert ddp["other"] == pytest.approx(5.0 - (0.25 + 1.5 + 0.75 + 1.0 + 0.5 + 0.5 + 0.02 + 0.25))
    assert ddp["imports"] == 1.5 and ddp["predict"] == 0.75
    assert ddp["ranks"] == "warm" and ddp["stopped"] == "cap" and ddp["precision"] == 0.05
    out = capsys.readouterr().out
    assert "goal wall <= 60 s: met" in out and "goal measuring >= 99%: MISSED" in out and "+-5.0%" in out


def test_a_session_stopped_by_timeout_misses_the_wall_goal(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tool = _tool()
    code = tool.main(
        ["--json", "out.json", "--goal-wall", "600", "--", sys.executable, "-c", "raise SystemExit(124)"]
    )
    assert code == 124
    assert "goal wall <= 600 s: MISSED (stopped after" in capsys.readouterr().out


def test_a_fresh_start_names_the_run_that_ended_its_group(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "res"
    held = {"gb": 0.268, "within_limit": False, "tensors": [], "settings": []}
    dtype = {"setting": "default dtype", "fresh": "torch.float32", "left": "torch.bfloat16"}
    flipped = {"gb": 0.0, "within_limit": True, "tensors": [], "settings": [dtype]}
    _result(results, "ddp", 1.0, 5.0, ranks="fresh", left=held, when=1)
    _result(results, "fsdp", 1.0, 5.0, ranks="fresh", left={**held, "gb": 0.0, "within_limit": True}, when=2)
    _result(results, "zero2", 1.0, 5.0, left=flipped, when=3)
    _result(results, "zero0", 1.0, 5.0, ranks="fresh", when=4)
    code = _tool().main(
        ["--json", "out.json", "--", sys.executable, "-c", "pass", f"--llmbench-results-dir={results}"]
    )
    figures = json.loads((tmp_path / "out.json").read_text())
    assert code == 0 and figures["fresh_starts"] == 3
    assert figures["restarts"] == [
        "fsdp-ws1 after ddp-ws1 left 268 MB allocated",
        "zero0-ws1 after zero2-ws1 left default dtype changed",
    ]
    assert (
        "fresh ranks 3 times; caused by the run before: fsdp-ws1 after ddp-ws1 left 268 MB"
        in capsys.readouterr().out
    )


def test_windows_side_by_side_count_once_in_the_measured_share(tmp_path, monkeypatch, capsys):
    """Two lanes' windows that overlap for 2 s of their 4 and 3 s, and a third alone later: the wall
    time with a window open is 4 + 3 - 2 + 1 = 6 s, where their sum is 8 s."""
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "res"
    lane = {"lane": 1, "lanes": 2}
    _result(results, "ddp", window=4.0, total=5.0, opened=1000.0, lane=lane)
    _result(results, "fsdp", window=3.0, total=4.0, opened=1002.0, lane=lane | {"lane": 2})
    _result(results, "zero2", window=1.0, total=2.0, opened=1010.0)
    tool = _tool()
    sleep = [sys.executable, "-c", "import time; time.sleep(0.1)"]
    tool.main(["--json", "out.json", "--", *sleep, f"--llmbench-results-dir={results}"])
    figures = json.loads((tmp_path / "out.json").read_text())
    assert figures["measuring_sec"] == pytest.approx(6.0) and figures["windows_summed_sec"] == pytest.approx(
        8.0
    )
    assert figures["measuring_counted"] == "wall time with a window open"
    assert "counts each second once (summed over lanes: 8.0 s" in capsys.readouterr().out
    # a run that does not say when its window opened (an older result): summed, as before
    doc = json.loads((results / "bench-h-zero2-ws1-seq128_results" / "result.json").read_text())
    doc["timing"].pop("window_started_at_unix")
    (results / "bench-h-zero2-ws1-seq128_results" / "result.json").write_text(json.dumps(doc))
    tool.main(["--json", "out.json", "--", *sleep, f"--llmbench-results-dir={results}"])
    figures = json.loads((tmp_path / "out.json").read_text())
    assert figures["measuring_sec"] == pytest.approx(8.0) and figures["measuring_counted"] == "windows summed"
