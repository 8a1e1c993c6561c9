"""`llmbench plan` checks its input before it traces: every bad value is refused at once (before
torch is imported, where that can be known without it), in one line that names the fix, with exit
status 2 and no traceback; and a plan that runs prints none of the libraries' warnings its user
cannot act on.

The refusals run in one fresh interpreter, each through the `llmbench` entry point (cli.main) as a
user's command would: that interpreter imported no torch before the first case, so torch in
sys.modules after a case means a refusal waited for it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings

import pytest

from conftest import CHILD_UNSET, REPO
from llmbench_pytest.config.presets import gpu_memory, gpu_names, gpu_peak, model_names
from llmbench_pytest.config.spec import DEFAULT_STRATEGIES, STRATEGIES, offload_variants

GPUS = ", ".join(gpu_names())
DECODERS = ", ".join(n for n in model_names() if not n.startswith("encdec"))
HUGE = "9" * 400

# (arguments after `llmbench plan`, what stderr's one line says after "llmbench plan: error: ")
REFUSED = [
    # unknown names: the choices listed
    (["nosuchmodel", "--gpu", "H100"], "unknown model 'nosuchmodel': choose a preset (llama-tiny, "),
    (["", "--gpu", "H100"], "MODEL: needs a preset (llama-tiny, "),
    (["a" * 5000, "--gpu", "H100"], "MODEL 'aaaaaaaaaa"),  # a name the file system refuses to look up
    (["llama-tiny", "--gpu", "X999"], f"unknown GPU 'X999': give a size (80GiB, 24GB) or one of {GPUS}."),
    (["llama-tiny", "--gpu", ""], "unknown GPU '': give a size"),
    (["llama-tiny", "--gpu", "nan"], "unknown GPU 'nan': give a size"),
    # a negative memory, however it is written: the size without the minus
    (["llama-tiny", "--gpu=-5GB"], "--gpu '-5GB': a GPU's memory cannot be negative: give its size without "
     f"the minus (5GB) or its name ({GPUS})."),
    (["llama-tiny", "--gpu", "-80GiB"], "--gpu '-80GiB': a GPU's memory cannot be negative: give its size "
     "without the minus (80GiB)"),
    (["llama-tiny", "--gpu", "-0.5"], "--gpu '-0.5': a GPU's memory cannot be negative"),
    # a GPU sold with several memory sizes, named without one: which
    (["llama-tiny", "--gpu", "A100"], "--gpu 'A100': the A100 comes with 40 GB or 80 GB of memory: say "
     "which, --gpu 'A100 40GB' or --gpu 'A100 80GB' (or give the memory, 40GiB or 80GiB)."),
    (["llama-tiny", "--gpu", "a100-60gb"], "--gpu 'a100-60gb': the A100 comes with 40 GB or 80 GB of memory, "
     "not 60 GB: give the part (A100 40GB or A100 80GB) or the memory alone (60GiB)."),
    (["llama-tiny", "--gpu", "A10 40GB"], "--gpu 'A10 40GB': the A10 comes with 24 GB of memory, not 40 GB"),
    (["llama-tiny", "--gpu", "H100", "--strategies", "zero9"],
     "--strategies: unknown strategy 'zero9': choose from ddp, fsdp, "),
    (["llama-tiny", "--gpu", "H100", "--strategies", "ddp_offload"],
     "--strategies: strategy 'ddp_offload': ddp cannot offload to CPU. Strategies that can: zero1_offload"),
    (["llama-tiny", "--gpu", "H100", "--strategies", ""], "--strategies: needs at least one strategy name"),
    (["llama-tiny", "--gpu", "H100", "--strategies", ",,"], "--strategies: needs at least one strategy name"),
    (["llama-tiny", "--gpu", "H100", "--workload", "pretrain"],
     "--workload: must be one of causal_lm, lora, seq2seq; got 'pretrain'"),
    (["llama-tiny", "--gpu", "H100", "--dtype", "bf8"],
     "--dtype: must be one of bf16, fp16, fp32; got 'bf8'"),
    (["llama-tiny", "--gpu", "H100", "--dtype", ""], "--dtype: must be one of bf16, fp16, fp32; got ''"),
    # a model that does not train the workload, whatever the presets say it is
    (["gpt2", "--gpu", "24GB", "--workload", "seq2seq"],
     "--workload seq2seq trains an encoder-decoder and gpt2 is decoder-only: pick encdec-3m, "),
    (["encdec-50m", "--gpu", "24GB", "--workload", "causal_lm"],
     "encdec-50m is an encoder-decoder: use --workload seq2seq for encdec-50m, or pick a decoder-only "
     f"model for --workload causal_lm ({DECODERS})."),
    (["encdec-50m", "--gpu", "24GB"], "encdec-50m is an encoder-decoder: use --workload seq2seq"),
    (["encdec-3m", "--gpu", "24GB", "--workload", "lora"], "encdec-3m is an encoder-decoder: use --workload"),
    # numbers: zero, negative, not a number, empty, beyond what torch can represent
    (["llama-tiny", "--gpu", "24GB", "--batch", "0"], "--batch: must be 1 or more; got 0"),
    (["llama-tiny", "--gpu", "24GB", "--batch", "-1"], "--batch: must be 1 or more; got -1"),
    (["llama-tiny", "--gpu", "24GB", "--batch", "1.5"], "--batch: must be a whole number; got '1.5'"),
    (["llama-tiny", "--gpu", "24GB", "--batch", ""], "--batch: must be a whole number; got ''"),
    (["llama-tiny", "--gpu", "24GB", "--batch", "100000000000000000"],
     "batch 100000000000000000 x 128 tokens per GPU: the step's fp32 logits (2048 values a token) would "
     "take 1.05e+23 bytes, more than one torch tensor can hold (2**63): pass --batch 8796093022207 or less"),
    (["llama-tiny", "--gpu", "24GB", "--seq-len", "0"], "--seq-len: must be 1 or more; got 0"),
    (["llama-tiny", "--gpu", "24GB", "--seq-len", "-128"], "--seq-len: must be 1 or more; got -128"),
    (["llama-tiny", "--gpu", "24GB", "--seq-len", "1e3"], "--seq-len: must be a whole number; got '1e3'"),
    (["llama-tiny", "--gpu", "24GB", "--seq-len", "100000"],
     "--seq-len 100000 is longer than llama-tiny allows (512 positions): pass --seq-len 512 or less"),
    (["encdec-3m", "--gpu", "24GB", "--workload", "seq2seq", "--seq-len", "4096"],
     "--seq-len 4096 is longer than encdec-3m allows (512 positions)"),
    (["llama-tiny", "--gpu", "24GB", "--gpus", "0"], "--gpus: must be 1 or more; got 0"),
    (["llama-tiny", "--gpu", "24GB", "--gpus", "-3"], "--gpus: must be 1 or more; got -3"),
    (["llama-tiny", "--gpu", "24GB", "--gpus", "two"], "--gpus: must be a whole number; got 'two'"),
    (["llama-tiny", "--gpu", "24GB", "--gpus", HUGE],
     "--gpus: must be at most 2147483647 (torch.distributed counts ranks in 32 bits)"),
    (["llama-tiny", "--gpu", "0GB"], "--gpu '0GB': a GPU's memory must be above 0 and at most 9.22e+09 GB"),
    (["llama-tiny", "--gpu", "0GiB"], "--gpu '0GiB': a GPU's memory must be above 0"),
    (["llama-tiny", "--gpu", HUGE + "GB"], f"--gpu '{HUGE}GB': a GPU's memory must be above 0 and at most"),
    # the plot's file, found unwritable before the trace rather than after it
    (["llama-tiny", "--gpu", "24GB", "--plot", "/no/such/dir/plan.png"],
     "--plot: '/no/such/dir/plan.png': no folder '/no/such/dir': create it, or write the plot elsewhere"),
    (["llama-tiny", "--gpu", "24GB", "--plot", "/"], "--plot: '/' is a folder: give a file in it"),
    (["llama-tiny", "--gpu", "24GB", "--plot", ""], "--plot: needs a file name, such as plan.png"),
    (["llama-tiny", "--gpu", "24GB", "--plot", "plan.xyz"],
     "--plot: 'plan.xyz': matplotlib cannot write .xyz: name it .png"),
    # argparse's own: missing and unknown arguments
    (["llama-tiny"], "the following arguments are required: --gpu (see llmbench plan --help)"),
    (["--gpu", "H100"], "the following arguments are required: MODEL"),
    (["llama-tiny", "--gpu"], "argument --gpu: expected one argument"),
]  # fmt: skip

# local config files: what transformers makes of them is asked before the trace (torch by then)
CONFIGS = {
    "nonsense": {"model_type": "nonsense"},
    "t5": {"model_type": "t5", "vocab_size": 1000, "d_model": 64, "num_layers": 2, "num_heads": 2},
    "badllama": {"model_type": "llama", "hidden_size": "abc"},
    # no max_position_embeddings: BertConfig's default, 512, is fewer than the 1024 planned
    "bert": {"model_type": "bert", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 128},
    "notjson": "nope",
    "nomodeltype": [1, 2],
}  # fmt: skip
REFUSED_CONFIGS = [
    ("nonsense", [], "model_type 'nonsense' has no causal language model in transformers"),
    ("t5", [], "model_type 't5' has no causal language model in transformers"),
    ("badllama", [], "transformers refuses it: Validation error for field 'hidden_size'"),
    ("bert", [], "--seq-len 1024 is longer than {path} allows (512 positions, its bert config's): pass"),
    ("notjson", [], "/config.json' is not readable JSON"),
    ("nomodeltype", [], "/config.json' has no 'model_type': give a transformers config.json"),
    ("bert", ["--workload", "seq2seq"], "--workload seq2seq trains an encoder-decoder and {path} is"),
]

RUN_ALL = """
import contextlib, io, json, sys
from llmbench_pytest.cli import main

out = []
for argv in json.load(sys.stdin):
    err, std = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            rc = main(["plan", *argv])
    except SystemExit as exc:  # argparse's refusals
        rc = exc.code
    out.append({"rc": rc, "err": err.getvalue(), "out": std.getvalue(),
                "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules})
print(json.dumps(out))
"""


def _env(tmp: os.PathLike[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
    env.pop("PYTHONWARNINGS", None)  # what a user's shell has: warnings as Python shows them
    env["LLMBENCH_CACHE_DIR"] = str(tmp)  # nothing traced before: the trace's imports happen here
    return env


REFUSALS = "plan_refusals"
"""The tests that read `refusals`: one worker runs them, so its interpreter starts once (a
module-scoped fixture is set up once per pytest-xdist worker that runs one of its tests)."""


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """{case: its result}: the torch-free cases first (so torch in sys.modules is theirs), then the
    local config files."""
    tmp = tmp_path_factory.mktemp("plan-input")
    configs = []
    for name, _, _ in REFUSED_CONFIGS:
        folder = tmp / name
        folder.mkdir(exist_ok=True)
        content = CONFIGS[name]
        (folder / "config.json").write_text(content if isinstance(content, str) else json.dumps(content))
    for name, extra, _ in REFUSED_CONFIGS:
        configs.append([str(tmp / name), "--gpu", "H100", "--strategies", "ddp", *extra])
    cases = [args for args, _ in REFUSED] + configs
    done = subprocess.run(
        [sys.executable, "-c", RUN_ALL], input=json.dumps(cases), capture_output=True, text=True,
        cwd=tmp, env=_env(tmp / "cache"), timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    return tmp, dict(zip(map(json.dumps, cases), results, strict=True))


def _one_line_refusal(result: dict, line: str) -> None:
    err = result["err"].strip().splitlines()
    assert result["rc"] == 2, result
    assert "Traceback" not in result["err"], result["err"]
    assert len(err) == 1, err
    assert err[0].startswith("llmbench plan: error: " + line), err[0]
    assert result["out"] == ""


@pytest.mark.xdist_group(REFUSALS)
@pytest.mark.parametrize(("args", "line"), REFUSED, ids=[" ".join(a)[:60] for a, _ in REFUSED])
def test_bad_input_is_refused_at_once_in_one_line(refusals, args, line):
    _, results = refusals
    result = results[json.dumps(args)]
    _one_line_refusal(result, line)
    # refused before torch: a fraction of a second, not the seconds of imports a trace needs
    assert not result["torch"] and not result["transformers"], "refused only after importing torch"


@pytest.mark.xdist_group(REFUSALS)
@pytest.mark.parametrize(
    ("name", "extra", "line"), REFUSED_CONFIGS, ids=[n + "".join(e) for n, e, _ in REFUSED_CONFIGS]
)
def test_a_local_config_is_refused_before_the_trace(refusals, name, extra, line):
    tmp, results = refusals
    path = str(tmp / name)
    result = results[json.dumps([path, "--gpu", "H100", "--strategies", "ddp", *extra])]
    err = result["err"].strip().splitlines()
    assert result["rc"] == 2, result
    assert "Traceback" not in result["err"], result["err"]
    # "tracing ..." first where transformers had to be asked (torch is imported by then)
    assert len(err) <= 2 and err[-1].startswith("llmbench plan: error: "), err
    assert line.format(path=path) in err[-1], err[-1]


def _plan(args: list[str], tmp: os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", "plan", *args], capture_output=True, text=True,
        cwd=tmp, env=_env(tmp), timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        # LoRA: peft imports torchao (its kernels for other GPUs fail to load, torch deprecates how it
        # registers its enums), transformers deprecates what peft calls; GPT-2's Conv1D and loss type
        ["gpt2-tiny", "--gpu", "24GB", "--workload", "lora", "--strategies", "ddp"],
        # without LoRA transformers would import torchao itself, with its quantizers
        ["llama-tiny", "--gpu", "24GB", "--strategies", "ddp"],
    ],
    ids=["lora", "causal_lm"],
)
def test_a_plan_prints_no_library_warnings(tmp_path, args):
    done = _plan(args, tmp_path)
    assert done.returncode == 0, done.stderr
    err = done.stderr.strip().splitlines()
    assert err[0] == f"llmbench plan: tracing {args[0]} on this CPU ...", err
    assert len(err) == 2 and err[1].startswith("llmbench plan: ") and err[1].endswith(" s"), err


def test_a_local_config_the_trace_cannot_follow_is_one_line(tmp_path):
    """The trace of a user's own config can fail where no check before it looks (here: LoRA's
    adapted layers, named for llama, absent from BERT); as a rank records it, one line, exit 1."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS["bert"]))
    done = _plan([str(tmp_path), "--gpu", "24GB", "--workload", "lora", "--seq-len", "64",
                  "--strategies", "ddp"], tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"llmbench plan: error: {tmp_path}'s step cannot be traced: "), last
    assert "NoMatchingPeftModuleError: " in last, last


def test_the_quiet_libraries_are_quiet_while_planning_only():
    """Inside: the libraries' deprecation warnings and the named log records left out; llmbench's
    own and other loggers' not. After: the filters as they were (a benchmark run shows them all)."""
    from llmbench_pytest.plan.command import _quiet_libraries

    filters = list(warnings.filters)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    keep = Keep()
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).addHandler(keep)
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            with _quiet_libraries():
                warnings.warn_explicit("old", FutureWarning, "x.py", 1, module="transformers.modeling_utils")
                warnings.warn_explicit("old", DeprecationWarning, "x.py", 1, module="torch.utils")
                warnings.warn_explicit("ours", FutureWarning, "x.py", 1, module="llmbench_pytest.plan")
                logging.getLogger("torchao").warning("Failed to load /x/_C_mxfp8.so: no")
                logging.getLogger("torchao").warning("something else")
            warnings.warn_explicit("old", FutureWarning, "x.py", 1, module="transformers.modeling_utils")
            logging.getLogger("torchao").warning("Failed to load /x/_C_mxfp8.so: no")
    finally:
        for name in ("torchao", "torch.utils._pytree"):
            logging.getLogger(name).removeHandler(keep)
    assert [(str(w.message), w.category) for w in shown] == [("ours", FutureWarning), ("old", FutureWarning)]
    assert records == ["something else", "Failed to load /x/_C_mxfp8.so: no"]
    assert warnings.filters == filters
    assert not logging.getLogger("torchao").filters


def test_llmbench_help_says_which_strategies_a_plain_run_runs():
    """The README's "every default strategy (all but zero1_offload ...)", from config/spec.py."""
    left_out = [n for n in (*STRATEGIES, *offload_variants()) if n not in DEFAULT_STRATEGIES]
    assert left_out  # else the help's "all but" would name nothing
    done = subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", "--help"], capture_output=True, text=True, cwd=REPO,
        timeout=60, check=True,
    )  # fmt: skip
    text = " ".join(done.stdout.split())
    assert "pytest benchmarks/ every default strategy at world sizes 1, 2, 4, ..." in text, text
    assert f"(all but {', '.join(left_out)}; zero3_nvme needs --llmbench-nvme-path)" in text, text
    assert "every strategy at" not in text


@pytest.mark.parametrize(
    ("given", "name", "gib"),
    [
        ("A100 40GB", "A100 40GB", 40),
        ("a100-80gb", "A100 80GB", 80),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB", 40),  # torch's names, as nvidia-smi prints them
        ("NVIDIA A100 80GB PCIe", "A100 80GB", 80),
        ("H100", "H100 SXM", 80),  # one size: the name alone
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 80),
        ("80GiB", "80GiB", 80),
    ],
)
def test_a_gpu_named_with_its_size_plans_for_that_size(given, name, gib):
    assert gpu_memory(given) == (name, pytest.approx(gib * 2**30 / 1e9))


def test_the_a100s_two_sizes_change_no_mfu_peak():
    """MFU finds a GPU's peak by its device name, whatever its memory: both A100s keep the A100's."""
    for device in ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe"):
        peak = gpu_peak(device, "bf16")
        assert peak is not None and peak.tflops == 312.0 and peak.name == "A100"
