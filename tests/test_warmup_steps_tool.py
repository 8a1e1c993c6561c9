"""tools/warmup_steps.py: runs read from folders and from tarballs, a run kept in both counted once,
tiny runs left out by --min-seq, and the per-strategy table of a k-step warm-up's first step."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile

import pytest

from conftest import REPO


def _tool():
    spec = importlib.util.spec_from_file_location("warmup_steps", REPO / "tools" / "warmup_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(strategy, warmup, times, seq_len=2048, device="cuda"):
    return {
        "strategy": strategy,
        "workload": "causal_lm",
        "seq_len": seq_len,
        "device": device,
        "status": "ok",
        "rank": 0,
        "timing": {"warmup_step_sec": warmup},
        "step_times_sec": times,
    }


STEADY = _result("steady", [5.0, 1.3, 1.0, 1.0], [1.0] * 9 + [1.5])  # one slow window step in ten
SLOW = _result("slow3", [5.0, 3.0, 2.0], [1.0, 1.02, 0.98, 1.0, 1.01])  # warm-up step 3: 2x the median
SHORT = _result("steady", [4.0, 1.1], [2.0, 2.0, 2.0])  # two warm-up steps: nothing to say of step 3
TINY = _result("tiny", [9.0, 9.0, 9.0], [1.0, 1.0, 1.0], seq_len=128)
CPU = _result("cpu", [9.0, 9.0, 9.0], [1.0, 1.0, 1.0], device="cpu")


def test_by_strategy_reads_tarballs_drops_copies_and_tiny_runs(tmp_path, capsys):
    root = tmp_path / "results"
    for name, data in {"a": STEADY, "b": SLOW, "tiny": TINY, "cpu": CPU}.items():
        (root / "runs" / name).mkdir(parents=True)
        (root / "runs" / name / "result.json").write_text(json.dumps(data))
    with tarfile.open(root / "runs.tgz", "w:gz") as tar:
        for member, data in {"call/b/result.json": SLOW, "call/c/result.json": SHORT}.items():
            blob = json.dumps(data).encode()
            info = tarfile.TarInfo(member)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    out = tmp_path / "out.json"

    assert _tool().main([str(root), "--by-strategy", "--warmup", "2", "--json", str(out)]) == 0

    figures = json.loads(out.read_text())
    assert figures["left_out"] == {"duplicates": 1, "below_min_seq": 1}
    # the folder's copy of b is read first and kept; c is read from the tarball
    assert sorted(run["path"] for run in figures["runs"]) == [
        "runs.tgz:call/c/result.json",
        "runs/a/result.json",
        "runs/b/result.json",
    ]
    rows = {row["strategy"]: row for row in figures["by_strategy"]}
    assert set(rows) == {"steady", "slow3"}
    slow, steady = rows["slow3"], rows["steady"]
    assert (slow["runs"], slow["runs_judged"], slow["window_steps"]) == (1, 1, 5)
    assert slow["step_beyond_share"] == 1.0  # its warm-up step 3 is 2x the median
    assert slow["step_dev_mean"] == pytest.approx(1.0)
    assert slow["step_abs_dev_median"] == pytest.approx(1.0)
    assert slow["window_beyond_share"] == 0.0
    assert slow["window_abs_dev_median"] == pytest.approx(0.01)
    # the short run counts among the strategy's runs but is not judged, nor are its window steps
    assert (steady["runs"], steady["runs_judged"], steady["window_steps"]) == (2, 1, 10)
    assert steady["step_beyond_share"] == 0.0  # warm-up step 3 lay on the median
    assert steady["step_dev_mean"] == pytest.approx(0.0)
    assert steady["window_beyond_share"] == pytest.approx(0.1)

    printed = capsys.readouterr().out
    assert "3 GPU runs" in printed
    assert "1 copies of a run already read" in printed and "1 runs with seq_len below 512" in printed
    table = printed.split("by strategy", 1)[1]
    assert [line.split()[:4] for line in table.splitlines() if line.startswith("slow3")] == [
        ["slow3", "1/1", "100.0%", "0.0%"]
    ]
    assert "more often than the window's own steps: slow3\n" in table

    # --min-seq 0 takes the tiny run back; without --by-strategy, no such table
    assert _tool().main([str(root), "--min-seq", "0"]) == 0
    printed = capsys.readouterr().out
    assert "4 GPU runs" in printed and "by strategy" not in printed
