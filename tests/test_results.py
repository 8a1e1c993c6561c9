"""result.json: the benchmark specification's fields first, atomic writes, no run overwritten,
session folders, bad files named."""

import json
import os

import pytest

from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.report.collect import ReportError, read_run
from llmbench_pytest.results.build import build_result
from llmbench_pytest.results.measurement import Measurement
from llmbench_pytest.results.schema import SEED_FIELDS
from llmbench_pytest.results.storage import (
    LATEST,
    claim_run_paths,
    claim_session_dir,
    is_session_folder,
    session_folder_name,
    write_json_atomic,
)

SPEC = RunSpec(
    strategy="zero2",
    model="llama-tiny",
    seq_len=128,
    per_device_batch=2,
    grad_accum=2,
    steps=4,
    warmup=1,
    dtype="fp32",
    world_size=2,
)


def measured(**kw):
    base = dict(
        status="ok",
        step_times=[0.5, 0.5, 0.6, 0.4],
        losses=[8.0, 7.5, 7.0, 6.5],
        window_s=2.0,
        timing_method="perf_counter",
        per_rank=[
            {"rank": 0, "status": "ok", "census_bytes": 2e8, "peak_rss_bytes": 1e9},
            {"rank": 1, "status": "ok", "census_bytes": 3e8, "peak_rss_bytes": 2e9},
        ],
        model={"name": "llama-tiny", "params": 5_000_000, "flops_per_token": 3e7},
        env={"device": "cpu"},
    )
    base.update(kw)
    return Measurement(**base)


def test_seed_fields_come_first_in_the_seeds_order():
    result = build_result(SPEC, measured(), {})
    assert tuple(result)[: len(SEED_FIELDS)] == SEED_FIELDS


def test_throughput_counts_every_rank_and_micro_batch():
    result = build_result(SPEC, measured(), {})
    assert result["tokens_per_sec"] == pytest.approx(2 * 2 * 2 * 128 / 0.5)
    assert result["samples_per_sec"] == pytest.approx(8 / 0.5)
    assert result["step_time_median_sec"] == pytest.approx(0.5)
    assert result["first_loss"] == 8.0 and result["last_loss"] == 6.5
    assert result["model_state_gb"] == pytest.approx(0.3)  # the fullest rank
    assert result["peak_vram_gb"] is None  # no GPU: nothing claimed
    assert result["mfu"] is None and "no GPU" in result["mfu_reason"]


def test_unknown_gpu_gets_no_mfu_and_says_why():
    m = measured(env={"device": "cuda", "gpu_name": "Mystery GPU 9000"})
    result = build_result(SPEC.replace(device="cuda"), m, {})
    assert result["mfu"] is None
    assert "no fp32 peak for GPU 'Mystery GPU 9000'" in result["mfu_reason"]
    assert result["tflops_per_gpu"] > 0
    overridden = build_result(SPEC.replace(device="cuda"), m, {}, peak_tflops_override=100.0)
    assert overridden["mfu"] == pytest.approx(overridden["tflops_per_gpu"] / 100.0)


def test_failed_run_keeps_its_status_and_message():
    result = build_result(SPEC, Measurement(status="oom", error="rank 1: CUDA out of memory"), {})
    assert result["status"] == "oom" and result["error"].startswith("rank 1")
    assert result["tokens_per_sec"] is None and result["steps"] == 0
    json.dumps(result, allow_nan=False)  # still valid JSON


def test_a_second_run_never_overwrites_the_first(tmp_path):
    first = claim_run_paths(tmp_path, SPEC, host="node1")
    second = claim_run_paths(tmp_path, SPEC, host="node1")
    assert first.result == tmp_path / "bench-node1-zero2-ws2-seq128_results" / "result.json"
    assert first.log == tmp_path / "bench-node1-zero2-ws2-seq128.log"
    assert second.directory.name == "bench-node1-zero2-ws2-seq128-r2_results"


def test_other_workloads_and_variants_are_named_not_numbered_as_repeats(tmp_path):
    names = [
        claim_run_paths(tmp_path, spec, host="node1").directory.name
        for spec in (
            SPEC,
            SPEC.replace(workload="lora"),
            SPEC.replace(workload="lora", diagnostic="fp16"),
            SPEC.replace(workload="seq2seq"),
            SPEC.replace(workload="seq2seq", data="disk"),
            SPEC.replace(compile=True),
            SPEC.replace(grad_ckpt=True),
        )
    ]
    assert names == [
        "bench-node1-zero2-ws2-seq128_results",
        "bench-node1-zero2-ws2-seq128-lora_results",
        "bench-node1-zero2-ws2-seq128-lora-fp16_results",
        "bench-node1-zero2-ws2-seq128-seq2seq_results",
        "bench-node1-zero2-ws2-seq128-seq2seq-disk_results",
        "bench-node1-zero2-ws2-seq128-compile_results",
        "bench-node1-zero2-ws2-seq128-ckpt_results",
    ]


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "result.json"
    write_json_atomic(target, {"strategy": "ddp"})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"strategy": float("nan")})  # refused before anything is replaced
    assert json.loads(target.read_text()) == {"strategy": "ddp"}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_corrupt_or_truncated_result_is_named(tmp_path):
    bad = tmp_path / "result.json"
    bad.write_text('{"strategy": "ddp", "tokens_per')
    with pytest.raises(ReportError, match=rf"{bad}: truncated"):
        read_run(bad)


def test_each_session_has_a_folder_and_latest_links_to_the_newest(tmp_path):
    older = session_folder_name("aaaa1111", started=1_700_000_000)
    newer = session_folder_name("bbbb2222", started=1_700_000_060)
    assert older == "20231114-221320-aaaa1111" and is_session_folder(older)
    assert not any(map(is_session_folder, ("latest", "summary", "bench-h-ddp-ws1-seq128_results")))
    assert claim_session_dir(tmp_path, older) == tmp_path / older and (tmp_path / older).is_dir()
    assert os.readlink(tmp_path / LATEST) == older
    claim_session_dir(tmp_path, newer)
    assert os.readlink(tmp_path / LATEST) == newer
    # a session that started earlier and claims its folder late never takes the link back
    claim_session_dir(tmp_path, older)
    assert os.readlink(tmp_path / LATEST) == newer
    # runs of one session never collide with another's: no -r2 across sessions
    first = claim_run_paths(tmp_path / older, SPEC, host="node1")
    second = claim_run_paths(tmp_path / newer, SPEC, host="node1")
    assert first.directory.name == second.directory.name == "bench-node1-zero2-ws2-seq128_results"
    assert not list(tmp_path.glob(".latest*"))  # the link's temporary name is gone


def test_a_folder_of_the_users_own_called_latest_is_left_alone(tmp_path):
    (tmp_path / LATEST).mkdir()
    claim_session_dir(tmp_path, session_folder_name("cccc3333"))
    assert (tmp_path / LATEST).is_dir() and not (tmp_path / LATEST).is_symlink()
