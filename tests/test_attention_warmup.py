"""A fresh GPU rank compiles its attention beside its imports (worker/attention_warmup.py): the
shape is the model's, runs that have nothing of cuDNN's to compile start no thread, a warm-up that
fails is logged and changes nothing, and one that runs leaves memory and the generator as it found
them."""

import logging
import threading
import time

import pytest
import torch

from llmbench_pytest.config.presets import resolve_model
from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.worker.attention_warmup import AttentionShape, attention_ready, attention_shape

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible)")
LOG = logging.getLogger("llmbench.test")


def spec(**kw) -> RunSpec:
    base = dict(strategy="ddp", model="llama-1b", seq_len=2048, per_device_batch=8, steps=1, warmup=0,
                dtype="bf16", device="cuda")  # fmt: skip
    return RunSpec(**{**base, **kw})


def shape_of(run: RunSpec) -> AttentionShape | None:
    return attention_shape(run, resolve_model(run.model, run.model_config).config)


def test_the_shape_is_the_models_attention_as_sdpa_sees_it():
    assert shape_of(spec()) == AttentionShape(batch=8, heads=32, kv_heads=32, seq_len=2048, head_dim=64)
    # grouped-query attention keeps its key and value heads; gpt2 names its sizes otherwise
    assert shape_of(spec(model="mistral-tiny", seq_len=64, per_device_batch=2)) == AttentionShape(
        2, 4, 2, 64, 32
    )
    assert shape_of(spec(model="gpt2-tiny", seq_len=64, per_device_batch=2)) == AttentionShape(
        2, 4, 4, 64, 32
    )
    explicit = {"num_attention_heads": 4, "hidden_size": 128, "head_dim": 16}  # a config naming its head size
    assert attention_shape(spec(), explicit).head_dim == 16
    assert shape_of(spec(attention="cudnn")) is not None


@pytest.mark.parametrize(
    "run",
    [
        spec(dtype="fp32"),  # cuDNN's attention is half precision only
        spec(attention="flash"),  # prebuilt kernels: nothing to compile
        spec(attention="math"),
        spec(workload="seq2seq", model="encdec-3m", seq_len=64),
    ],
    ids=["fp32", "flash", "math", "seq2seq"],
)
def test_runs_with_no_cudnn_attention_warm_nothing(run):
    assert shape_of(run) is None


def test_on_a_cpu_no_thread_starts_and_nothing_is_recorded():
    phases: dict[str, float] = {}
    before = threading.active_count()
    with attention_ready(spec(device="cpu"), resolve_model("llama-1b"), torch.device("cpu"), phases, LOG):
        assert threading.active_count() == before
    assert phases == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warm-up succeeds where CUDA works")
def test_a_failed_warm_up_is_logged_and_the_body_still_runs(caplog):
    """Where CUDA cannot start (this CPU build), the thread's own failure must not escape."""
    phases: dict[str, float] = {}
    ran = []
    with caplog.at_level(logging.WARNING, logger="llmbench.test"):
        with attention_ready(spec(), resolve_model("llama-1b"), torch.device("cuda", 0), phases, LOG):
            ran.append(True)
    assert ran == [True]
    assert "attention warm-up failed" in caplog.text
    assert "attention_warmup_sec" not in phases and phases["attention_join_sec"] >= 0


@needs_gpu
@pytest.mark.own_process_on_gpu
def test_a_warm_up_overlaps_the_body_and_leaves_memory_and_generator_as_they_were(caplog):
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.init()
    allocated = torch.cuda.memory_allocated(device)
    generator = torch.cuda.get_rng_state(device)
    phases: dict[str, float] = {}
    with caplog.at_level(logging.WARNING, logger="llmbench.test"):
        with attention_ready(spec(), resolve_model("llama-1b"), device, phases, LOG):
            time.sleep(0.5)  # the imports it runs beside
    assert "failed" not in caplog.text
    assert phases["attention_warmup_sec"] > 0
    assert phases["attention_join_sec"] < phases["attention_warmup_sec"]
    assert torch.cuda.memory_allocated(device) == allocated
    assert torch.equal(torch.cuda.get_rng_state(device), generator)
