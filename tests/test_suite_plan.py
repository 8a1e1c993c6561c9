"""tools/suite_plan.py: the default suite's wall time on more GPUs, from a session's measured
configurations (issue 44's plan for 4 and 8 GPUs). The packing and the host-heavy rule by hand."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def _session(tmp_path, rows):
    path = tmp_path / "tta.json"
    path.write_text(json.dumps({"rows": [
        {"test": f"b.py::test_x[{s}-ws{w}-seq8-m]", "name": f"{s}-ws{w}", "status": "ok", "total": t,
         "window": t / 2}
        for s, w, t in rows
    ]}))  # fmt: skip
    return path


def test_side_by_side_packs_each_world_size_onto_its_lanes_and_runs_offload_alone(tmp_path):
    rows = [("ddp", 1, 10.0), ("fsdp", 1, 6.0), ("zero2", 1, 4.0), ("zero2_offload", 1, 30.0),
            ("ddp", 2, 12.0), ("fsdp", 2, 8.0), ("zero2", 2, 5.0), ("zero2_offload", 2, 31.0)]  # fmt: skip
    out = tmp_path / "plan.json"
    subprocess.run(
        [sys.executable, "tools/suite_plan.py", str(_session(tmp_path, rows)), "--gpus=2,4", f"--json={out}"],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    two, four = json.loads(out.read_text())["plans"]
    # 2 GPUs: world size 1 on two lanes (10 | 6 + 4) then offload alone; world size 2 one at a time
    assert [r["side_by_side_sec"] for r in two["world_sizes"]] == [10.0 + 30.0, 56.0]
    assert two["one_at_a_time_sec"] == 50.0 + 56.0
    # 4 GPUs: world size 4 was not run, so it takes each configuration's 2-GPU figure
    ws4 = four["world_sizes"][2]
    assert ws4["assumed_from_world_size"] == 2 and ws4["one_at_a_time_sec"] == 56.0
    assert four["world_sizes"][1]["side_by_side_sec"] == 13.0 + 31.0  # two lanes: 12 | 8 + 5
    # the floor: half of each time was its window; every configuration beside others, offload too:
    # world size 1, windows 5, 3, 2, 15 on two lanes: no order beats the longest, 15 (their even
    # share is 12.5); world size 2 on one lane: their sum, 28
    assert [r["windows_floor_sec"] for r in two["world_sizes"]] == [15.0, 28.0]
    assert two["windows_floor_sec"] == 43.0 < two["side_by_side_sec"]
    # 4 GPUs, world size 2 on two lanes: 6, 4, 2.5, 15.5 -> the longest, 15.5; world size 1 on four: 15
    assert [r["windows_floor_sec"] for r in four["world_sizes"]][:2] == [15.0, 15.5]


def _plan(tmp_path, rows, *options):
    out = tmp_path / "plan.json"
    cmd = [sys.executable, "tools/suite_plan.py", str(_session(tmp_path, rows)), "--gpus=2", f"--json={out}"]
    done = subprocess.run([*cmd, *options], cwd=REPO, capture_output=True, text=True, check=False)
    return done, (json.loads(out.read_text()) if done.returncode == 0 else None)


ROWS = [("ddp", 1, 10.0), ("fsdp", 1, 6.0), ("zero2-disk", 1, 8.0),
        ("ddp", 2, 12.0), ("fsdp", 2, 8.0), ("zero2-disk", 2, 9.0)]  # fmt: skip


def test_a_shorter_suite_is_planned_with_its_configurations_or_windows_cut_and_says_so(tmp_path):
    """The options a decision on the suite's time chooses between, planned from the same rows."""
    _, whole = _plan(tmp_path, ROWS)
    assert whole["what_if"] is None and whole["plans"][0]["one_at_a_time_sec"] == 24.0 + 29.0
    done, doc = _plan(tmp_path, ROWS, "--leave-out=*fsdp*")
    assert "planned with: left out *fsdp*" in done.stdout
    assert [r["one_at_a_time_sec"] for r in doc["plans"][0]["world_sizes"]] == [18.0, 21.0]
    # the disk configuration at world size 1 only: it still runs alone there, and is gone at 2
    _, doc = _plan(tmp_path, ROWS, "--only-at-one=*-disk*")
    one, two = doc["plans"][0]["world_sizes"]
    assert one["side_by_side_sec"] == 10.0 + 8.0 and one["configurations"] == 3
    assert two["one_at_a_time_sec"] == 20.0 and two["configurations"] == 2
    # windows (half of each time) above world size 1 ended at 4 s: 6, 4 and 4.5 s lose 2, 0, 0.5
    done, doc = _plan(tmp_path, ROWS, "--window-cap=4")
    one, two = doc["plans"][0]["world_sizes"]
    assert one["one_at_a_time_sec"] == 24.0 and two["one_at_a_time_sec"] == 29.0 - 2.5
    assert two["windows_floor_sec"] == 4.0 + 4.0 + 4.0 and "ended at 4 s" in doc["what_if"]


def test_a_what_if_that_names_nothing_or_an_impossible_window_is_refused(tmp_path):
    done, _ = _plan(tmp_path, ROWS, "--leave-out=test_lora*")
    assert (
        done.returncode == 2 and "'test_lora*' matches no configuration; they are named like" in done.stderr
    )
    done, _ = _plan(tmp_path, ROWS, "--window-cap=0")
    assert done.returncode == 2 and "--window-cap 0.0: give the longest window in seconds" in done.stderr
    done, _ = _plan(tmp_path, ROWS, "--leave-out=*")
    assert done.returncode == 2 and "left no configuration" in done.stderr


def test_a_suite_measured_in_several_sessions_is_added_up_and_one_stopped_early_is_named(tmp_path):
    """A suite that takes more than one device call runs as several sessions: its wall time is their
    sum and its measured share their windows over that sum, not an average of the shares."""
    paths = []
    for i, (wall, windows, status) in enumerate(((100.0, 70.0, 0), (300.0, 150.0, 124))):
        path = tmp_path / f"tta{i}.json"
        row = {"test": "b.py::test_x[ddp-ws1-seq8-m]", "name": "ddp-ws1", "status": "ok", "total": 5.0}
        doc = {"wall_sec": wall, "measuring_sec": windows, "exit_code": status, "configurations": 2 + i}
        path.write_text(json.dumps({**doc, "rows": [row]}))
        paths.append(str(path))
    out = tmp_path / "plan.json"
    done = subprocess.run([sys.executable, "tools/suite_plan.py", *paths, "--gpus=2", f"--json={out}"],
                          cwd=REPO, capture_output=True, text=True, check=True)  # fmt: skip
    measured = json.loads(out.read_text())["measured"]
    assert measured["wall_sec"] == 400.0 and measured["window_open_share"] == 220.0 / 400.0
    assert measured["stopped_early"] == [paths[1]] and measured["configurations"] == 5
    assert "measured: 5 configurations in 2 session(s), 100.0 + 300.0 = 400.0 s" in done.stdout
    assert "(55.00%); stopped before its end" in done.stdout


def test_a_window_cap_reaches_sizes_taken_from_smaller_runs_and_no_empty_world_size_is_planned(tmp_path):
    rows = [("ddp", 1, 10.0), ("ddp", 2, 12.0), ("solo", 1, 10.0)]  # solo ran at world size 1 only
    # at world size 2 solo takes its 1-GPU figures, and the cap cuts them too: windows 6 and 5 -> 1
    _, doc = _plan(tmp_path, rows, "--window-cap=1")
    assert doc["plans"][0]["world_sizes"][1]["one_at_a_time_sec"] == (12.0 - 5.0) + (10.0 - 4.0)
    # every configuration at world size 1 only: world size 2 is no part of the plan, nor its extra
    _, doc = _plan(tmp_path, rows, "--only-at-one=*", "--extra-per-world-size=30")
    assert [r["world_size"] for r in doc["plans"][0]["world_sizes"]] == [1]
    assert doc["plans"][0]["one_at_a_time_sec"] == 20.0 + 30.0


def test_files_without_windows_or_wall_times_are_named_not_counted_as_zero(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"rows": [
        {"test": "b.py::test_x[ddp-ws1-seq8-m]", "name": "ddp-ws1", "status": "ok", "total": 5.0}
    ]}))  # fmt: skip
    run = [sys.executable, "tools/suite_plan.py", str(old), "--gpus=2"]
    done = subprocess.run(run, cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and f"measured: the wall time is not recorded in {old}" in done.stdout
    done = subprocess.run([*run, "--window-cap=5"], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "these files hold no windows" in done.stderr
    done = subprocess.run([*run, "--window-cap=nan"], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "give the longest window in seconds" in done.stderr
