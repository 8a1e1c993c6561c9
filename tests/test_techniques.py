"""The technique axes (--llmbench-fused-loss, --llmbench-fp8, --llmbench-attention) without training
a session: parsing, the matrix (ids, skips, refusals), the chunked loss against transformers' own,
fp8 conversion (emulated on CPU), the process-wide switches put back, the profiler's attention
kernels, fp8's labelled MFU, and the report's "What each technique buys" table.
"""

from __future__ import annotations

import json

import pytest
import torch

from conftest import saved_results
from llmbench_pytest.analysis.trace import attention_kind, summarize
from llmbench_pytest.config.hardware import Hardware, detect
from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.config.presets import resolve_model
from llmbench_pytest.config.spec import RunSpec, SpecError
from llmbench_pytest.launch.matrix import build_matrix
from llmbench_pytest.report.summary.build import write_report
from llmbench_pytest.results.build import build_result
from llmbench_pytest.results.measurement import Measurement
from llmbench_pytest.worker.chunked_loss import chunk_rows, linear_cross_entropy
from llmbench_pytest.worker.models import build_model
from llmbench_pytest.worker.techniques import TechniqueUnavailable, close_techniques

CPU = Hardware(device="cpu", cpu_cores=2)


def gpu(name: str, capability: tuple[int, int]) -> Hardware:
    """A one-GPU machine as hardware.detect describes it (the matrix reads nothing else)."""
    return Hardware("cuda", name, 1, 79.6, bf16=True, cpu_cores=16, compute_capability=capability)


H100 = gpu("NVIDIA H100 80GB HBM3", (9, 0))
A100 = gpu("NVIDIA A100-SXM4-80GB", (8, 0))


def options(**values: str) -> SessionOptions:
    return SessionOptions().with_values(values, "command line")


def spec(**kw) -> RunSpec:
    base = dict(
        strategy="ddp", model="llama-tiny", seq_len=64, per_device_batch=2, steps=1, warmup=0, dtype="fp32"
    )
    return RunSpec(**{**base, **kw})


def entries(hw: Hardware = CPU, **values: str) -> dict[str, str | None]:
    """Test id -> skip reason (None: it runs) for one benchmark of the session."""
    return {e.id: e.skip for e in build_matrix(options(**values), hw, [1])}


# --- options and the matrix -----------------------------------------------------------------


def test_axes_parse_lists_and_keep_the_order_given():
    opts = options(fused_loss="none,chunked", fp8="tensorwise", attention="flash, math")
    assert opts.fused_loss == ("none", "chunked")
    assert opts.fp8 == ("tensorwise",)
    assert opts.attention == ("flash", "math")
    assert SessionOptions().fused_loss == ("none",) and SessionOptions().attention == ("default",)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"fused_loss": "ligr"}, "--llmbench-fused-loss: must be one of none, chunked, liger; got 'ligr'"),
        ({"fp8": "e4m3"}, "--llmbench-fp8: must be one of none, tensorwise, rowwise; got 'e4m3'"),
        ({"attention": "fa3"}, "--llmbench-attention: must be one of default, flash, cudnn, efficient, math"),
        ({"fp8": ","}, "--llmbench-fp8: needs one or more of none, tensorwise, rowwise, comma-separated"),
    ],
)  # fmt: skip
def test_a_bad_value_names_the_option_and_the_choices(values, message):
    with pytest.raises(SpecError) as err:
        SessionOptions().with_values(values, "command line")
    assert message in str(err.value)


def test_an_axis_is_in_the_id_when_it_varies_or_is_off_its_default():
    ids = entries(strategies="ddp", fused_loss="none,chunked", attention="math")
    assert list(ids) == [
        "ddp-ws1-seq128-llama-tiny-loss_none-attn_math",
        "ddp-ws1-seq128-llama-tiny-loss_chunked-attn_math",
    ]
    assert list(entries(strategies="ddp")) == ["ddp-ws1-seq128-llama-tiny"]  # defaults: ids unchanged


def test_the_axes_reach_the_run_spec():
    (entry,) = build_matrix(options(strategies="fsdp", fused_loss="chunked", fp8="rowwise"), CPU, [1])
    assert (entry.spec.fused_loss, entry.spec.fp8, entry.spec.attention) == ("chunked", "rowwise", "default")


def test_what_cpu_cannot_run_is_skipped_with_the_reason():
    ids = entries(strategies="ddp", fused_loss="liger", attention="default,cudnn,efficient,fa2")
    assert ids["ddp-ws1-seq128-llama-tiny-loss_liger-attn_default"].startswith(
        "liger-kernel runs Triton kernels: needs a CUDA GPU"
    )
    plain = entries(strategies="ddp", attention="flash,math,cudnn,efficient,fa2")
    assert plain["ddp-ws1-seq128-llama-tiny-attn_flash"] is None  # torch has a CPU flash kernel
    assert plain["ddp-ws1-seq128-llama-tiny-attn_math"] is None
    assert plain["ddp-ws1-seq128-llama-tiny-attn_cudnn"].startswith(
        "SDPA's cuDNN backend runs on CUDA GPUs only"
    )
    assert (
        "memory-efficient backend runs on CUDA GPUs only" in plain["ddp-ws1-seq128-llama-tiny-attn_efficient"]
    )
    assert plain["ddp-ws1-seq128-llama-tiny-attn_fa2"].startswith("FlashAttention-2 runs on CUDA GPUs only")


def test_fp8_runs_emulated_on_cpu_and_is_skipped_on_a_gpu_without_fp8_tensor_cores():
    assert entries(strategies="ddp", fp8="tensorwise") == {"ddp-ws1-seq128-llama-tiny-fp8_tensorwise": None}
    on_a100 = entries(A100, strategies="ddp", fp8="tensorwise", compile="true", model="llama-tiny")
    (reason,) = on_a100.values()
    assert reason == (
        "float8 matmuls need compute capability 8.9 or more (H100, H200, L40S, L4, RTX 4090); "
        "NVIDIA A100-SXM4-80GB is 8.0"
    )


def test_fp8_without_compile_on_a_gpu_is_refused_naming_the_fix():
    with pytest.raises(
        SpecError, match=r"--llmbench-fp8=tensorwise needs --llmbench-compile on a GPU: .*Add "
    ):
        entries(H100, strategies="ddp", fp8="none,tensorwise", model="llama-tiny")
    assert entries(H100, strategies="ddp", fp8="tensorwise", compile="true", model="llama-tiny")


def test_liger_is_not_offered_to_zero3_which_has_not_gathered_lm_head():
    ids = entries(H100, strategies="zero3", fused_loss="liger", model="llama-tiny")
    (reason,) = ids.values()
    if "not installed" not in reason:  # where liger-kernel is installed, ZeRO-3 is the reason
        assert "use --llmbench-fused-loss=chunked with ZeRO-3" in reason


def test_the_encoder_decoder_runs_without_the_axes():
    opts = options(fused_loss="none,chunked", workload="seq2seq", data="memory")
    skips = {e.id: e.skip for e in build_matrix(opts, CPU, [1])}
    assert skips["ddp-ws1-seq64-encdec-3m-memory-loss_none"] is None
    assert (
        "the seq2seq benchmark runs at their defaults" in skips["ddp-ws1-seq64-encdec-3m-memory-loss_chunked"]
    )
    with pytest.raises(SpecError, match=r"the encoder-decoder \(seq2seq\) trains without them"):
        spec(workload="seq2seq", model="encdec-3m", fused_loss="chunked")


# --- the chunked loss -------------------------------------------------------------------------


def _build(**kw):
    s = spec(**kw)
    return build_model(s, resolve_model(s.model, s.model_config), torch.device("cpu"))


def test_chunked_loss_matches_the_models_own_loss_and_gradients():
    torch.manual_seed(0)
    ref, fused = _build(), _build(fused_loss="chunked")
    ids = torch.randint(0, ref.vocab_size, (2, 64))
    assert fused.summary["techniques"]["fused_loss"] == {
        "kind": "chunked",
        "chunk_rows": 8192,
        "compiled": False,
    }
    want, got = ref.loss(ref.module, ids), fused.loss(fused.module, ids)
    assert got.item() == pytest.approx(want.item(), abs=1e-5)
    want.backward()
    got.backward()
    for (name, a), (_, b) in zip(ref.module.named_parameters(), fused.module.named_parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_chunks_add_up_to_one_pass_and_ignored_labels_count_nowhere():
    torch.manual_seed(1)
    hidden = torch.randn(2, 50, 16, requires_grad=True)
    weight = torch.randn(40, 16, requires_grad=True)
    labels = torch.randint(0, 40, (2, 50))
    labels[0, 10:20] = -100
    logits = hidden @ weight.t()
    want = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, 40), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    want_grads = torch.autograd.grad(want, (hidden, weight))
    for rows in (7, 32, 100):  # chunks that do not divide the 100 rows, and one chunk
        got = linear_cross_entropy(hidden, weight, labels, rows)
        got_grads = torch.autograd.grad(got, (hidden, weight))
        assert float(got) == pytest.approx(float(want), abs=1e-5)
        for a, b in zip(want_grads, got_grads, strict=True):
            assert torch.allclose(a, b, atol=1e-6)


def test_chunk_rows_keep_one_chunk_of_logits_near_a_gibibyte():
    assert chunk_rows(32_000) == 8192
    assert chunk_rows(128_256) == 2092
    assert chunk_rows(4096) == 8192 and chunk_rows(10**9) == 256


def test_a_frozen_lm_head_gets_no_gradient():
    hidden = torch.randn(1, 9, 8, requires_grad=True)
    weight = torch.randn(12, 8)  # frozen
    loss = linear_cross_entropy(hidden, weight, torch.randint(0, 12, (1, 9)), 4)
    loss.backward()
    assert hidden.grad is not None and weight.grad is None


# --- fp8, attention, and what a run leaves behind -----------------------------------------------


def test_fp8_converts_the_block_linears_and_keeps_lm_head():
    pytest.importorskip("torchao")
    built = _build(fp8="tensorwise")
    kinds = {name: type(m).__name__ for name, m in built.module.named_modules()}
    assert sum(k == "Float8Linear" for k in kinds.values()) == 4 * 7  # q k v o gate up down, 4 layers
    assert kinds["lm_head"] == "Linear"
    assert built.summary["techniques"]["fp8"] == {
        "recipe": "tensorwise",
        "layers": 28,
        "kept_16bit": ["lm_head"],
        "emulated": True,
        "fsdp_float8_all_gather": False,
    }
    built.loss(built.module, torch.randint(0, built.vocab_size, (2, 64))).backward()  # emulated fp8 trains


def test_fp8_with_no_layer_fp8_can_take_is_unavailable():
    pytest.importorskip("torchao")
    odd = (("hidden_size", 40), ("intermediate_size", 100), ("num_attention_heads", 4))
    with pytest.raises(TechniqueUnavailable, match="no linear layer of llama-tiny can take fp8 GEMMs"):
        _build(fp8="tensorwise", model_config=odd)


def test_a_run_puts_back_the_process_wide_switches_it_changed():
    flags = (torch.backends.cuda.flash_sdp_enabled, torch.backends.cuda.math_sdp_enabled)
    before = [f() for f in flags], torch._inductor.config.fx_graph_cache
    built = _build(attention="math", compile=True)
    assert not torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
    assert torch._inductor.config.fx_graph_cache is False  # its key ignores the SDPA backend
    assert built.summary["techniques"]["attention"]["sdpa_backend"] == "MATH"
    close_techniques(built)
    close_techniques(built)  # twice is harmless
    assert ([f() for f in flags], torch._inductor.config.fx_graph_cache) == before


def test_the_profiler_names_the_attention_kernels_that_ran():
    assert (
        attention_kind("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", True) == "cudnn"
    )
    assert (
        attention_kind("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", True) == "flash"
    )
    assert attention_kind("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", True) == "efficient"
    assert attention_kind("void flash::flash_bwd_dq_dk_dv_loop_kernel<...>", True) == "fa2"
    assert attention_kind("ampere_bf16_s16816gemm_bf16_128x128", True) is None
    assert attention_kind("aten::_scaled_dot_product_flash_attention_for_cpu", False) == "flash"
    q = torch.randn(1, 2, 16, 8)
    # CPU activity only: by default the profiler also traces CUDA where a GPU is visible, and that
    # made a CUDA context (0.5 GiB) in the suite's process, which later sessions' GPU check refused
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    trace = json.loads(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": e.key, "ts": 0, "dur": 1} for e in prof.events()
    ]}))  # fmt: skip
    assert summarize(trace, 1, "cpu").attention_kernels == {"flash": 1}


# --- result.json and the report -----------------------------------------------------------------


def _result(step: float, peak_gb: float, fp8: str = "none", loss: str = "none") -> dict:
    s = spec(dtype="bf16", device="cuda", compile=True, fp8=fp8, fused_loss=loss, seq_len=128)
    m = Measurement(
        status="ok",
        step_times=[step] * 4,
        losses=[8.0, 7.5, 7.0, 6.5],
        window_s=4 * step,
        timing_method="cuda_event",
        per_rank=[{"rank": 0, "status": "ok", "peak_allocated_bytes": peak_gb * 1e9}],
        model={"name": "llama-tiny", "params": 5_261_568, "flops_per_token": 1e12, "techniques": {}},
        env={"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3"},
    )
    return build_result(s, m, {})


def test_result_records_the_axes_and_labels_fp8_mfu():
    plain, fp8 = _result(0.5, 40), _result(0.4, 30, fp8="tensorwise")
    assert (plain["fused_loss"], plain["fp8"], plain["attention"]) == ("none", "none", "default")
    assert plain["mfu_note"] is None and plain["mfu_vs_fp8_peak"] is None
    assert fp8["fp8"] == "tensorwise"
    assert fp8["mfu_note"] == (
        "model FLOPs against the 989.4 TFLOP/s bf16 dense peak; matmuls in fp8 (tensorwise): "
        "not a bf16 result"
    )
    assert fp8["mfu_vs_fp8_peak"] == pytest.approx(fp8["mfu"] * 989.4 / 1978.9)
    assert list(fp8).index("fused_loss") == list(fp8).index("side_by_side") + 1  # right after _what_ran


def test_report_shows_what_each_technique_buys(tmp_path):
    runs = {
        "plain": _result(0.50, 40.0),
        "chunked": _result(0.45, 30.0, loss="chunked"),
        "chunked-fp8": _result(0.30, 25.0, fp8="tensorwise", loss="chunked"),
    }
    for name, data in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(data))
    files = write_report(tmp_path, plots=False)
    md = files.markdown.read_text()
    section = md[md.index("## What each technique buys") :]
    rows = {
        cells[3]: cells
        for line in section.splitlines()
        if (cells := [c.strip() for c in line.split("|")])[1:2] == ["ddp"]
    }
    assert set(rows) == {"fused loss chunked", "fp8 tensorwise"}  # one row per technique whose baseline ran
    assert rows["fused loss chunked"][4:9] == [
        "compile",
        "512 -> 569",
        "1.11x",
        "51.7% -> 57.5%",
        "40.0 -> 30.0 (-25.0%)",
    ]
    assert rows["fp8 tensorwise"][4:8] == ["compile, loss chunked", "569 -> 853", "1.50x", "57.5% -> 86.2%*"]
    assert "MFU* (fp8 runs): model FLOPs against the bf16 dense peak" in section
    header = files.csv.read_text().splitlines()[0].split(",")
    assert header[-11:] == [
        "fused_loss", "fp8", "attention", "attention_ran", "mfu_note", "mfu_vs_fp8_peak", "fp8_layers",
        "fused_loss_chunk_rows", "peak_predicted_gb", "peak_reserved_predicted_gb", "peak_prediction_gap",
    ]  # fmt: skip


# --- GPU only: each skips with the reason where it cannot run ----------------------------------

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible)")


@needs_gpu
@pytest.mark.own_process_on_gpu
def test_liger_patches_this_model_and_nothing_process_wide():
    pytest.importorskip("liger_kernel.transformers", reason="needs liger-kernel (pip install liger-kernel)")
    from transformers.models.llama import modeling_llama

    watched = (
        (modeling_llama, "apply_rotary_pos_emb"),
        (modeling_llama, "LlamaRMSNorm"),
        (modeling_llama, "LlamaMLP"),
        (modeling_llama.LlamaForCausalLM, "forward"),
        (torch.nn.functional, "cross_entropy"),
    )
    before = [getattr(owner, name) for owner, name in watched]
    s = spec(fused_loss="liger")
    cuda = torch.device("cuda", 0)
    fused = build_model(s, resolve_model(s.model), cuda)
    ref = build_model(spec(), resolve_model(s.model), cuda)
    assert [getattr(owner, name) for owner, name in watched] == before
    ids = torch.randint(0, ref.vocab_size, (2, 64), device=cuda)
    assert fused.loss(fused.module, ids).item() == pytest.approx(ref.loss(ref.module, ids).item(), abs=1e-4)


@needs_gpu
def test_gpu_records_the_attention_kernels_that_ran_and_fp8_runs_for_real(bench):
    cc = detect().compute_capability or (0, 0)  # from NVML: this process makes no CUDA context
    fp8 = ["--llmbench-fp8=none,tensorwise", "--llmbench-compile"] if cc >= (8, 9) else []
    result = bench.runpytest_subprocess(
        "benchmarks/test_pretrain.py",
        "--llmbench-strategies=fsdp",
        "--llmbench-world-sizes=1",
        "--llmbench-model=llama-tiny",
        "--llmbench-attention=default,flash,efficient",
        "--llmbench-steps=4",
        *fp8,
        "-rs",
    )
    runs = {(r["fp8"], r["attention"]): r for r in saved_results(bench.path)}
    for (recipe, attention), run in runs.items():
        assert run["status"] == "ok", (recipe, attention, run["error"])
        if attention != "default":
            assert run["attention_ran"] == attention, run["techniques"]["attention_kernels"]
        if recipe == "tensorwise":
            assert run["techniques"]["fp8"]["emulated"] is False and run["mfu_note"]
    assert len(runs) == (6 if fp8 else 3), result.stdout.str()[-3000:]
