"""Seed 003's encoder-decoder: trained for real at CPU size, from memory and from disk shards."""

import itertools
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import FEW_STEPS, REPO, saved_results
from llmbench_pytest.config import datasets
from llmbench_pytest.config.spec import SpecError

# 4 steps per epoch on one rank at the preset's batch of 8: seconds per run on CPU
SMALL = ("--llmbench-dataset-samples=32", "--llmbench-epochs=2", "--llmbench-warmup-epochs=1")


def add_encdec(root: Path) -> None:
    name = "test_encoder_decoder.py"
    (root / "benchmarks" / name).write_text((REPO / "benchmarks" / name).read_text())


@pytest.fixture
def encdec_bench(bench):
    add_encdec(bench.path)
    return bench


def runs(path: Path) -> dict[str, dict]:
    return {f"{d['strategy']}-ws{d['world_size']}-{d['data']}": d for d in saved_results(path)}


def data_folders(root: Path) -> list[Path]:
    return sorted(p for p in (root / "results" / datasets.DATA_DIR_NAME).iterdir() if p.is_dir())


SHARDED = "sharded_session"
SHARD_MB = "--llmbench-shard-mb=0.0021"  # 8 samples of 256 bytes a shard: 4 shards of 32 samples


@pytest.fixture(scope="module")
def sharded_session(shared_bench):
    """ddp and zero2, from memory and from disk shards (written by the first disk run, in the
    results' default data folder), and the report over the four runs."""
    bench = shared_bench(SHARDED)
    add_encdec(bench.path)
    result = bench.runpytest_subprocess(
        "benchmarks/test_encoder_decoder.py",
        *SMALL,
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp,zero2",
        SHARD_MB,
        "-v",
    )
    report = bench.run(sys.executable, "-m", "llmbench_pytest.cli", "report", "results", "--no-plots", "-q")
    return bench, result, report


@pytest.mark.xdist_group(SHARDED)
def test_memory_and_disk_runs_report_epochs_and_the_data_wait(sharded_session):
    encdec_bench, result, report = sharded_session
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_encoder_decoder?ddp-ws1-seq64-encdec-3m-disk? PASSED*"])
    found = runs(encdec_bench.path)
    assert set(found) == {"ddp-ws1-memory", "ddp-ws1-disk", "zero2-ws1-memory", "zero2-ws1-disk"}
    for key, run in found.items():
        assert run["status"] == "ok" and run["workload"] == "seq2seq" and run["model"] == "encdec-3m", key
        assert run["last_loss"] < run["first_loss"], key
        assert run["steps"] == 8 and len(run["step_times_sec"]) == 8  # 2 epochs x 4 steps
        assert [e["epoch"] for e in run["epochs"]] == [1, 2]
        for epoch in run["epochs"]:
            assert epoch["samples"] == 32 and epoch["steps"] == 4
            # on the CPU nothing overlaps: the wall clock holds the steps, the waits for data
            # (outside the steps, so within the time no step ran), and a little loop overhead
            assert epoch["compute_sec"] + epoch["data_wait_sec"] <= epoch["wall_sec"] * 1.01
            assert epoch["idle_sec"] == pytest.approx(epoch["wall_sec"] - epoch["compute_sec"])
            assert epoch["idle_sec"] >= epoch["data_wait_sec"] * 0.99
            assert epoch["samples_per_sec"] == pytest.approx(32 / epoch["wall_sec"])
        assert 0 <= run["data_wait_fraction"] < 1
        assert run["epoch_samples_per_sec"] <= run["samples_per_sec"] * 1.01  # waits only slow it
        assert run["flops_per_token"] > 6 * run["params"] * 0.5
    disk = found["ddp-ws1-disk"]["data_source"]
    assert disk["source"] == "disk" and disk["shards"] == 4 and disk["page_cache_drop_requested"] is True
    assert found["zero2-ws1-disk"]["data_source"]["reused"] is True  # written once, by the first run
    (folder,) = data_folders(encdec_bench.path)
    assert Path(disk["folder"]) == folder
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["manifest.json", "shard_0000.bin", "shard_0001.bin", "shard_0002.bin", "shard_0003.bin"]
    assert all((folder / n).stat().st_size == 8 * 256 for n in names if n.endswith(".bin"))

    # the report shows the epochs and what the disk path cost
    assert report.ret == 0, report.stderr.str()
    text = (encdec_bench.path / "results" / "summary" / "BENCHMARK_REPORT.md").read_text()
    assert "## Encoder-decoder epochs" in text and "What the disk path costs" in text


@pytest.mark.xdist_group(SHARDED)
def test_disk_shards_are_reused_while_the_parameters_match(sharded_session, encdec_bench, tmp_path):
    # the shards the shared session wrote, moved to another disk (--llmbench-data-dir): a session
    # with the same parameters reads them there, and does not write them again
    written_by, _, _ = sharded_session
    (source,) = data_folders(written_by.path)
    data_dir = tmp_path / "ssd"
    shutil.copytree(source, data_dir / source.name)
    args = (
        "benchmarks/test_encoder_decoder.py",
        *SMALL,
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-data=disk",
        SHARD_MB,
        f"--llmbench-data-dir={data_dir}",
    )
    shard = data_dir / source.name / "shard_0000.bin"
    written = shard.stat().st_mtime_ns
    encdec_bench.runpytest_subprocess(*args).assert_outcomes(passed=1)
    assert shard.stat().st_mtime_ns == written  # same parameters: read, not rewritten
    (run,) = saved_results(encdec_bench.path)
    assert run["data_source"]["reused"] is True and Path(run["data_source"]["folder"]) == shard.parent

    # a damaged dataset is written again, not read; in the same session another sequence length
    # is another dataset, written beside the first
    with open(shard, "r+b") as fh:
        fh.truncate(100)
    encdec_bench.runpytest_subprocess(*args, "--llmbench-seq-lens=64,32").assert_outcomes(passed=2)
    assert shard.stat().st_size == 8 * 256
    # every run (one key per configuration in runs() would keep only one of them)
    runs = saved_results(encdec_bench.path)
    reasons = [r["data_source"]["why_written"] for r in runs]
    assert any("shard_0000.bin holds 100 bytes, not 2048" in (w or "") for w in reasons), reasons
    assert sorted(r["seq_len"] for r in runs) == [32, 64, 64]
    assert len(sorted(data_dir.iterdir())) == 2


def test_two_ranks_split_each_epoch_through_the_launcher(encdec_bench):
    result = encdec_bench.runpytest_subprocess(
        "benchmarks/test_encoder_decoder.py",
        *SMALL,
        "--llmbench-world-sizes=2",
        "--llmbench-strategies=fsdp",
        "--llmbench-data=disk",
        "--llmbench-data-workers=1",
        timeout=600,
    )
    result.assert_outcomes(passed=1)
    (run,) = runs(encdec_bench.path).values()
    assert run["world_size"] == 2 and run["steps"] == 4  # 32 samples / 2 ranks / batch 8 = 2 per epoch
    assert all(e["samples"] == 32 for e in run["epochs"])
    assert run["data_source"]["workers"] == 1


def test_dataset_bytes_do_not_depend_on_how_they_are_read(tmp_path):
    import logging

    import torch

    from llmbench_pytest.worker.seq2seq_data import MemorySamples, ShardSamples, make_samples, write_shards

    layout = datasets.DatasetLayout(vocab_size=512, seq_len=16, samples=300, seed=3, shard_mb=0.004)
    assert layout.samples_per_shard == 62 and layout.num_shards == 5
    folder = tmp_path / layout.folder_name
    write_shards(layout, str(folder), logging.getLogger("test"))
    assert datasets.manifest_problem(str(folder), layout) is None
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [s["samples"] for s in manifest["shards"]] == [62, 62, 62, 62, 52]
    picks = [0, 61, 62, 299, 150]
    from_disk = ShardSamples(layout, str(folder)).__getitems__(picks)
    assert torch.equal(from_disk, MemorySamples(layout).__getitems__(picks))
    assert torch.equal(from_disk[1], make_samples(layout, 61, 1)[0])  # chunk boundaries do not matter
    # the target is a fixed function of the source: learnable, never the start token
    assert int(from_disk.max()) < layout.vocab_size - 1
    # no leftovers of the staging folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [layout.folder_name]


def test_bad_encoder_decoder_input_is_refused_with_the_fix(encdec_bench, tmp_path):
    cases = [
        (
            ["--llmbench-model=llama-tiny"],
            "seq2seq workload trains the encoder-decoder benchmark's model*encdec-3m*",
        ),
        (["--llmbench-dataset-samples=4"], "*less than one optimizer step*--llmbench-dataset-samples=8*"),
        (["--llmbench-data=tape"], "*--llmbench-data*memory, disk*'tape'*"),
        (["--llmbench-model-config=nhead=3"], "*nhead 3 must divide d_model 128*"),
    ]
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases.append((["--llmbench-data=disk", f"--llmbench-data-dir={afile}"], "*is a file, not a folder*"))
    for args, pattern in cases:
        result = encdec_bench.runpytest_subprocess(
            "benchmarks/test_encoder_decoder.py", "--llmbench-launch=inprocess", *args
        )
        assert result.ret != 0, args
        result.stderr.fnmatch_lines([f"*{pattern}"])
        assert "Traceback" not in result.stderr.str(), args


def test_an_encoder_decoder_preset_is_refused_by_the_decoder_workloads(bench):
    result = bench.runpytest_subprocess("benchmarks/test_pretrain.py", "--llmbench-model=encdec-3m")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*'encdec-3m' is an encoder-decoder*--llmbench-workload=seq2seq*"])


def test_a_session_model_skips_the_benchmarks_of_another_kind(encdec_bench, tmp_path):
    # all benchmarks with a decoder-only model: the decoder one runs, the encoder-decoder skips
    result = encdec_bench.runpytest_subprocess(
        "benchmarks/",
        "--llmbench-model=llama-tiny",
        "--llmbench-strategies=ddp",
        "--llmbench-launch=inprocess",
        *FEW_STEPS,
        "-rs",
    )
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*seq2seq workload trains the encoder-decoder benchmark's model; 'llama-tiny'*"]
    )
    # settings only the encoder-decoder checks do not stop a session that `-k` leaves it out of
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = encdec_bench.runpytest_subprocess(
        "benchmarks/", "-k", "test_pretrain", f"--llmbench-data-dir={afile}", "--collect-only", "-q"
    )
    assert result.ret == 0, result.stderr.str()
    assert "test_encoder_decoder" not in result.stdout.str()


def test_disk_only_sessions_skip_the_workloads_that_train_from_memory(bench):
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py", "--llmbench-data=disk", "--llmbench-strategies=ddp", "-rs"
    )
    result.assert_outcomes(skipped=2)  # world sizes 1 and 2
    result.stdout.fnmatch_lines(["*causal_lm workload trains from memory; --llmbench-data=disk selects*"])


def test_a_dataset_folder_that_cannot_be_written_is_refused_before_the_first_run(encdec_bench, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    result = encdec_bench.runpytest_subprocess(
        "benchmarks/test_encoder_decoder.py",
        *SMALL,
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-data=disk",
        f"--llmbench-data-dir={blocker / 'data'}",
    )
    # refused before anything trains, in one line that names the option, the path and the fix
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --llmbench-data-dir: data directory '*not-a-dir/data' is not writable (*not-a-dir is a "
         "file, not a folder): pass --llmbench-data-dir=DIR naming a folder *"]
    )  # fmt: skip
    assert runs(encdec_bench.path) == {}


def test_epoch_plan_counts_the_steps_of_every_rank():
    plan = datasets.epoch_plan(100, batch=8, world_size=3, grad_accum=2)
    assert (plan.samples_per_rank, plan.micro_batches, plan.steps) == (34, 4, 2)
    assert datasets.epoch_plan(0, batch=4, world_size=2, grad_accum=1).samples == 20 * 8
    with pytest.raises(SpecError, match="less than one optimizer step"):
        datasets.epoch_plan(10, batch=8, world_size=2, grad_accum=1)
    assert os.path.basename(datasets.default_data_dir("res")) == ".llmbench-data"


def test_the_layers_compute_what_torchs_transformer_layers_compute():
    """The layers are written in seq2seq.py (so that torch.compile traces them); with the same
    weights they must give what torch's pre-norm TransformerEncoderLayer/DecoderLayer give."""
    import torch
    from torch import nn

    from llmbench_pytest.worker.seq2seq import DecoderLayer, EncoderLayer

    torch.manual_seed(0)
    d, heads, ff = 32, 4, 64
    common = dict(dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    ref_enc = nn.TransformerEncoderLayer(d, heads, ff, **common).eval()
    ref_dec = nn.TransformerDecoderLayer(d, heads, ff, **common).eval()
    enc, dec = EncoderLayer(d, heads, ff), DecoderLayer(d, heads, ff)

    def attention(ours, theirs):
        if hasattr(ours, "qkv"):
            ours.qkv.weight.data, ours.qkv.bias.data = theirs.in_proj_weight.data, theirs.in_proj_bias.data
        else:
            w, b = theirs.in_proj_weight.data, theirs.in_proj_bias.data
            ours.q.weight.data, ours.q.bias.data = w[:d], b[:d]
            ours.kv.weight.data, ours.kv.bias.data = w[d:], b[d:]
        ours.out.load_state_dict(theirs.out_proj.state_dict())

    attention(enc.self_attn, ref_enc.self_attn)
    attention(dec.self_attn, ref_dec.self_attn)
    attention(dec.cross_attn, ref_dec.multihead_attn)
    for ours, theirs in ((enc, ref_enc), (dec, ref_dec)):
        ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
        ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            if hasattr(theirs, name):
                getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())

    source, target = torch.randn(2, 12, d), torch.randn(2, 9, d)
    memory = enc(source)
    torch.testing.assert_close(memory, ref_enc(source))
    mask = nn.Transformer.generate_square_subsequent_mask(9)
    torch.testing.assert_close(
        dec(target, memory), ref_dec(target, memory, tgt_mask=mask, tgt_is_causal=True)
    )


@pytest.mark.parametrize(("precision", "epochs", "stopped"), [("0.0001", 4, "cap"), ("0.99", 2, "precision")])
def test_epochs_follow_until_the_precision_is_known_or_the_step_cap(encdec_bench, precision, epochs, stopped):
    # 4 steps an epoch: the default 2 always run, then whole epochs up to 16 steps while the
    # mean step time is known less well than the target (epochs given on the command line, as
    # SMALL does, are exactly that many). At +-99% two epochs nearly always do; on a loaded
    # machine a slow first epoch can leave the mean unknown to +-99%, and then a third follows:
    # each epoch after the second must come after a line saying the target was not yet reached.
    result = encdec_bench.runpytest_subprocess(
        "benchmarks/test_encoder_decoder.py",
        "--llmbench-dataset-samples=32",
        "--llmbench-warmup-epochs=1",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-data=memory",
        f"--llmbench-precision={precision}",
        "--llmbench-max-steps=16",
    )
    result.assert_outcomes(passed=1)
    (run,) = runs(encdec_bench.path).values()
    logs = "".join(p.read_text(errors="replace") for p in (encdec_bench.path / "results").rglob("*.log"))
    not_yet = len(re.findall(r"epoch \d of at most 4: the mean is known to \+-[\d.]+%, not yet", logs))
    if stopped == "precision":
        epochs += not_yet
        if not_yet == 2:
            stopped = "cap"  # the fourth epoch ran, not known to +-99% yet: the cap ends it there
    else:
        assert not_yet == 2, logs[-3000:]
    assert len(run["epochs"]) == epochs and run["steps"] == 4 * epochs
    measured = run["timing"]["measurement"]
    assert measured["stopped"] == stopped and measured["steps"] == 4 * epochs
    assert {k: measured[k] for k in ("mode", "epochs", "max_epochs", "target_precision")} == {
        "mode": "epochs", "epochs": 2, "max_epochs": 4, "target_precision": float(precision)
    }  # fmt: skip


def test_past_the_step_cap_epochs_follow_until_the_window_budget_while_the_mean_is_unknown(encdec_bench):
    # 2 steps an epoch, a cap of 8 steps (4 epochs); the target +-0.01% and the check's bound
    # +-0.01% are never reached, so past the cap whole epochs follow until the window's 3 s budget
    # (given here; on a GPU the default is 20 s, on the CPU none) is spent. The model is cut to one
    # layer a side, a vocabulary of 512 and batch 2, so that an epoch takes about 0.03 s on the
    # quiet 2-core VM (2026-11-27): the cap's four epochs spend about 1/25 of the budget, and a
    # machine many times slower still measures past the cap. (With the preset's 0.3 s epochs a
    # loaded CI run took 2.02, 2.24, 1.94, 1.88 s: the 6 s budget then was spent before the cap.)
    # What the timing checks then say on this shared CPU (the bound, given on the command line, is
    # judged here too) is not this test's matter: how long the window measured is.
    result = encdec_bench.runpytest_subprocess(
        "benchmarks/test_encoder_decoder.py",
        "--llmbench-dataset-samples=4",
        "--llmbench-batch=2",
        "--llmbench-model-config=vocab_size=512,num_encoder_layers=1,num_decoder_layers=1",
        "--llmbench-warmup-epochs=1",
        "--llmbench-launch=inprocess",
        "--llmbench-strategies=ddp",
        "--llmbench-data=memory",
        "--llmbench-precision=0.0001",
        "--llmbench-max-interval=0.0001",
        "--llmbench-max-steps=8",
        "--llmbench-window-budget=3",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1 and "error" not in outcomes, outcomes
    (run,) = runs(encdec_bench.path).values()
    assert run["status"] == "ok", run["error"]
    measured = run["timing"]["measurement"]
    assert measured["budget_s"] == 3.0 and measured["max_epochs"] == 4
    walls = [e["wall_sec"] for e in run["epochs"]]
    assert all(e["steps"] == 2 for e in run["epochs"]), run["epochs"]
    # The rule at any speed, from the run's own epochs (the window adds their wall times up as
    # they are written here): the cap's four epochs always run; past them an epoch follows only
    # while the epochs before it have not spent the budget; the first one that spends it is the
    # last. So the window holds max(4, k) epochs, k the first count whose sum reaches 3 s, and the
    # budget ends it. A machine slow enough to spend the budget within the cap stops at the cap,
    # on the budget; on this VM the cap spends a small part of it and the epochs past it are
    # what is tested (taken out, the window stops at the cap on "cap" and this fails).
    spent = list(itertools.accumulate(walls))
    first = next((k for k, total in enumerate(spent, 1) if total >= 3.0), None)
    assert first is not None, walls  # the budget was spent: nothing else ends this window
    assert len(walls) == max(4, first), (len(walls), first, walls)
    assert measured["stopped"] == "budget", (measured, walls)
    logs = "".join(p.read_text(errors="replace") for p in (encdec_bench.path / "results").rglob("*.log"))
    assert (
        len(re.findall(r"epoch \d+, past the step cap: .* short of the \+-0\.0% it is judged by", logs))
        == len(walls) - 4
    )
