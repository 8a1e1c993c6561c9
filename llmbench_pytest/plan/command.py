"""`llmbench plan`: which strategies fit a model on a GPU, and the largest batch each can take.

Its arguments are declared (`add_arguments`) and checked (`request`) here and nowhere else, with
the parsers and tables the benchmarks' options use (config/options.py, spec.py, presets.py), so both
refuse the same values in the same words. Everything that can be known without torch is checked
before torch is imported: a refused command answers in a fraction of a second, not after the
seconds of imports a trace needs. A new argument is one line in each.

For every strategy the step is traced at the asked batch (worker/step_trace.py, on this CPU, a
few seconds per precision) and the strategy's states and buffers added (analysis/peak_model.py).
Activations and temporaries are taken as proportional to the batch (`_largest_batch`), and the
largest batch that fits is the most sequences whose predicted peak fits: allocated memory within
what the GPU's memory leaves to PyTorch's caching allocator (analysis/fit.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis import fit
from ..analysis.peak_model import RESERVED_OVER_ALLOCATED, PeakPrediction
from ..config.options import _choice, _model, _positive_int, _strategies
from ..config.presets import gpu_memory, gpu_names, model_names, resolve_model
from ..config.spec import DEFAULT_STRATEGIES, DTYPES, WORKLOADS, RunSpec, SpecError, parse_strategy
from ..launch.matrix import workload_model_mismatch

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator

    from ..config.presets import ModelPreset

LARGEST_TENSOR = 2**63
"""torch computes a storage's size in bytes as a signed 64-bit integer: no tensor as large can be
made, not even a fake one ("Storage size calculation overflowed": a batch of 1e17 on llama-tiny)."""
MOST_GPUS = 2**31 - 1
"""torch.distributed numbers its ranks with a C int: no larger world size can start."""


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    """Every argument of `llmbench plan`, taken as text: `request` parses and checks each, so that
    its message names the flag, the value and the fix (an argparse type= would wrap it in words
    of its own)."""
    cmd.add_argument("model", metavar="MODEL", help="a preset name (llama-1b, mistral-7b, ...) or a local "
                     "config.json (file or folder)")  # fmt: skip
    cmd.add_argument(
        "--gpu", required=True, help=f"a GPU's name ({', '.join(gpu_names())}) or its memory (80GiB, 24GB)"
    )
    cmd.add_argument("--gpus", default="1", metavar="N", help="GPUs the model trains on (the world size; "
                     "default 1)")  # fmt: skip
    cmd.add_argument("--batch", metavar="N", help="sequences per GPU (default: the preset's)")
    cmd.add_argument("--seq-len", metavar="N", help="tokens per sequence (default: the preset's)")
    cmd.add_argument("--dtype", default="bf16", help=f"compute precision: {', '.join(DTYPES)} (default bf16)")
    cmd.add_argument("--workload", default="causal_lm", help=f"what trains: {', '.join(WORKLOADS)} (default "
                     "causal_lm: every weight; seq2seq: the encoder-decoder presets)")  # fmt: skip
    cmd.add_argument("--grad-ckpt", action="store_true", help="with activation checkpointing")
    cmd.add_argument("--strategies", metavar="NAMES", help="comma-separated, or 'all' (default: the "
                     f"benchmarks' default ones: {', '.join(DEFAULT_STRATEGIES)})")  # fmt: skip
    cmd.add_argument("--plot", metavar="FILE", help="also draw the parts per strategy into FILE (png)")
    # a value that starts with a minus and a digit (--gpu -80GiB) is a value, so that its check
    # refuses it with the fix; argparse before 3.13 took '-80GiB' for an option and said only
    # "expected one argument" (3.13 reads it this way itself; no option of this command looks so)
    cmd._negative_number_matcher = re.compile(r"^-\.?\d")


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What `llmbench plan` was asked, parsed and checked."""

    model: str
    """As given (a preset's name or a path): the table's title."""
    preset: ModelPreset
    gpu_name: str
    capacity: float
    """The GPU's memory in GB (1e9 bytes)."""
    gpus: int
    batch: int
    seq_len: int
    specs: tuple[RunSpec, ...]
    """One per strategy, in the order asked."""
    plot: Path | None


def request(args: argparse.Namespace) -> PlanRequest:
    """`args` (add_arguments') parsed and checked, alone and together, without torch: a SpecError
    says which flag, the value and the fix."""
    model = _flag("MODEL", _model, args.model)
    gpu_name, capacity = _gpu(args.gpu)
    gpus = _flag("--gpus", _world_size, args.gpus)
    dtype = _flag("--dtype", _choice(*DTYPES), args.dtype)
    workload = _flag("--workload", _choice(*WORKLOADS), args.workload)
    strategies = (
        DEFAULT_STRATEGIES if args.strategies is None else _flag("--strategies", _strategies, args.strategies)
    )
    plot = None if args.plot is None else _flag("--plot", _plot_file, args.plot)
    try:
        preset = resolve_model(model)
    except OSError as exc:  # a path the system refuses to look at (too long, a loop of links)
        raise SpecError(
            f"MODEL {model[:60]!r}: cannot look for a local config there ({exc.strerror or exc}); give "
            f"a preset ({', '.join(model_names())}) or a config.json path."
        ) from None
    _check_workload(model, preset, workload)
    batch = preset.batch if args.batch is None else _flag("--batch", _positive_int, args.batch)
    seq_len = preset.seq_len if args.seq_len is None else _flag("--seq-len", _positive_int, args.seq_len)
    limit = preset.max_seq_len
    if limit is not None and seq_len > limit:
        raise SpecError(
            f"--seq-len {seq_len} is longer than {model} allows ({limit} positions): pass --seq-len "
            f"{limit} or less, or pick a model with a longer context."
        )
    _check_tensor_size(preset, batch, seq_len)
    specs = tuple(
        _spec(name, model, gpus, batch, seq_len, dtype, workload, args.grad_ckpt) for name in strategies
    )
    return PlanRequest(model, preset, gpu_name, capacity, gpus, batch, seq_len, specs, plot)


def _flag(flag: str, parse: Callable[[Any], Any], raw: Any) -> Any:
    """`parse(raw)`, its refusal prefixed with the flag, as the benchmarks' options prefix theirs."""
    try:
        return parse(raw)
    except SpecError as exc:
        raise SpecError(f"{flag}: {exc}") from None


def _gpu(text: str) -> tuple[str, float]:
    """(name, GB) of --gpu; presets.gpu_memory's refusal of an unknown name as it words it."""
    name, capacity = gpu_memory(text)
    if capacity < 0:
        raise SpecError(
            f"--gpu {text!r}: a GPU's memory cannot be negative: give its size without the minus "
            f"({text.strip().lstrip('-')}) or its name ({', '.join(gpu_names())})."
        )
    if not 0 < capacity <= LARGEST_TENSOR / 1e9:
        raise SpecError(
            f"--gpu {text!r}: a GPU's memory must be above 0 and at most {LARGEST_TENSOR / 1e9:.3g} GB "
            f"(2**63 bytes, what torch counts); give its size (80GiB, 24GB) or its name "
            f"({', '.join(gpu_names())})."
        )
    return name, capacity


def _world_size(raw: Any) -> int:
    gpus = _positive_int(raw)
    if gpus > MOST_GPUS:
        raise SpecError(
            f"must be at most {MOST_GPUS} (torch.distributed counts ranks in 32 bits); got {gpus}"
        )
    return gpus


def _plot_file(raw: Any) -> Path:
    """A file matplotlib can write, in a folder that exists: found out now, not after the trace."""
    text = str(raw)
    path = Path(text).expanduser()
    if not text.strip():
        raise SpecError("needs a file name, such as plan.png")
    if path.is_dir():
        raise SpecError(f"{text!r} is a folder: give a file in it, such as {text.rstrip('/')}/plan.png")
    if not path.parent.is_dir():
        raise SpecError(f"{text!r}: no folder {str(path.parent)!r}: create it, or write the plot elsewhere")
    if not os.access(path.parent, os.W_OK):
        raise SpecError(f"{text!r}: folder {str(path.parent)!r} is not writable: write the plot elsewhere")
    if importlib.util.find_spec("matplotlib") is None:
        raise SpecError("the plot is drawn with matplotlib, which is not installed: pip install matplotlib")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lstrip(".").lower()
    if suffix and suffix not in formats:
        raise SpecError(
            f"{text!r}: matplotlib cannot write .{suffix}: name it .png, or .{', .'.join(formats)}"
        )
    return path


def _check_workload(model: str, preset: ModelPreset, workload: str) -> None:
    """The benchmarks' rule (launch/matrix.py), so both refuse the same pairs; worded for this
    command's flags."""
    if workload_model_mismatch(workload, preset.name, preset.architecture) is None:
        return
    encdec = [n for n in model_names() if resolve_model(n).architecture == "encdec"]
    if workload == "seq2seq":
        raise SpecError(
            f"--workload seq2seq trains an encoder-decoder and {model} is decoder-only: pick "
            f"{', '.join(encdec)}, or plan {model} with --workload causal_lm or lora."
        )
    decoders = [n for n in model_names() if n not in encdec]
    raise SpecError(
        f"{model} is an encoder-decoder: use --workload seq2seq for {model}, or pick a decoder-only "
        f"model for --workload {workload} ({', '.join(decoders)})."
    )


def _check_tensor_size(preset: ModelPreset, batch: int, seq_len: int) -> None:
    """The step's largest tensor within what torch can make: the loss's fp32 logits (a vocabulary's
    row per token), or where a local config names no vocabulary the token ids (int64, source and
    target for seq2seq)."""
    vocab = preset.config.get("vocab_size")
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
        per_token, what = 4 * vocab, f"fp32 logits ({vocab} values a token)"
    else:
        per_token, what = 16, "token ids"
    size = batch * seq_len * per_token
    if size < LARGEST_TENSOR:
        return
    most = (LARGEST_TENSOR - 1) // (seq_len * per_token)
    fix = f"pass --batch {most} or less" if most else "pass a shorter --seq-len"
    raise SpecError(
        f"batch {batch} x {seq_len} tokens per GPU: the step's {what} would take {size:.3g} bytes, more "
        f"than one torch tensor can hold (2**63): {fix} (without --batch the plan says which batch fits)."
    )


@dataclass(frozen=True, slots=True)
class PlanRow:
    strategy: str
    prediction: PeakPrediction
    per_sequence_gb: float
    largest_batch: int


class CannotPlan(Exception):
    """The step cannot be traced here: torch, transformers or peft missing or too old, or a model
    the trace cannot follow. Not a usage error (exit 1)."""


def _spec(strategy: str, model: str, gpus: int, batch: int, seq_len: int, dtype: str, workload: str,
          grad_ckpt: bool) -> RunSpec:  # fmt: skip
    info, offload = parse_strategy(strategy)
    nvme = "/plan" if offload == "nvme" else None  # the path changes nothing on the device
    return RunSpec(
        strategy=info.name, offload=offload, model=model, seq_len=seq_len, per_device_batch=batch, steps=1,
        warmup=0, dtype=dtype, world_size=gpus, device="cuda", workload=workload, grad_ckpt=grad_ckpt,
        nvme_path=nvme,
    )  # fmt: skip


def plan(req: PlanRequest) -> list[PlanRow]:
    """One row per strategy: traced (imports torch), with the libraries' notices a user of this
    command cannot act on left out (`_quiet_libraries`)."""
    with _quiet_libraries():
        try:
            from ..worker.step_trace import TraceUnavailable
            from .predict import predict_spec
        except ImportError as exc:  # torch missing, or too old for the trace
            raise CannotPlan(f"cannot trace a step here: {exc}") from exc
        if req.preset.architecture == "auto":
            _check_transformers_config(req)
        out = []
        for spec in req.specs:
            try:
                at_batch = predict_spec(spec, req.preset)
            except ImportError as exc:  # transformers or peft missing, or too old
                raise CannotPlan(f"cannot trace a step here: {exc}") from exc
            except TraceUnavailable as exc:
                raise CannotPlan(f"{req.model}'s step cannot be traced: {exc}") from exc
            except Exception as exc:
                if req.preset.architecture != "auto":
                    raise  # a preset that does not trace is llmbench's defect: its traceback helps
                # a local config's model, as a rank records it in place of its prediction
                raise CannotPlan(
                    f"{req.model}'s step cannot be traced: {type(exc).__name__}: {_one_line(exc)}"
                ) from exc
            out.append(PlanRow(spec.name, at_batch, *_largest_batch(at_batch, req.batch, req.capacity)))
    return out


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line, cut at 300 characters (transformers' can list hundreds
    of model types)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _check_transformers_config(req: PlanRequest) -> None:
    """A local config.json as transformers reads it, before the trace builds its model: a model type
    with a causal language model, values its config class accepts, and at most the positions it
    allows, its class's default included (a file may leave that out: bert's 512)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from ..worker.models import _config

    where = f"model config {req.preset.path!r}"
    model_type = req.preset.config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise SpecError(
            f"{where}: model_type {model_type!r} has no causal language model in transformers "
            f"{transformers.__version__}: give a decoder's config (llama, mistral, gpt2, ...) or a preset."
        )
    try:
        config = _config(req.preset)  # as the rank builds it
    except Exception as exc:  # whatever the config class raises for a value it refuses
        raise SpecError(f"{where}: transformers refuses it: {_one_line(exc)}") from None
    positions = (getattr(config, key, None) for key in ("max_position_embeddings", "n_positions"))
    limit = next((n for n in positions if isinstance(n, int)), None)
    if limit is not None and req.seq_len > limit:
        raise SpecError(
            f"--seq-len {req.seq_len} is longer than {req.model} allows ({limit} positions, its "
            f"{model_type} config's): pass --seq-len {limit} or less."
        )


LIBRARY_MODULES = r"(torch|transformers|peft|torchao)(\.|$)"
"""Whose deprecation warnings `llmbench plan` leaves out: what the libraries say to the code that
calls them (transformers' `is_gradient_checkpointing`, to peft), not to the user of this command."""
UNACTIONABLE_WARNINGS = (
    # peft sets fan_in_fan_out itself for GPT-2's Conv1D projections, which llmbench's LoRA config
    # (worker/models.build_lora) adapts without it: nothing this command's user chose or can change
    (UserWarning, "fan_in_fan_out is set to False", "peft"),
)
"""(category, start of the message, module) of the other warnings left out."""
UNACTIONABLE_LOGS = {
    # torchao's kernels built for other GPUs and torch versions (peft imports torchao, LoRA only,
    # to look for quantized weights; the trace uses none of it)
    "torchao": "Failed to load",
    # torch's notice to torchao, which registers its enums in a way torch deprecates
    "torch.utils._pytree": "is an Enum subclass",
    # GPT-2's config names no loss; transformers says it uses the causal LM's, as the trace wants
    "transformers.modeling_utils": "was set in the config but it is unrecognized",
}
"""Logger: the words of the one record of it left out."""


class _Drop(logging.Filter):
    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words

    def filter(self, record: logging.LogRecord) -> bool:
        return self.words not in record.getMessage()


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """While `llmbench plan` traces, and never after (a benchmark run prints what it prints):
    transformers told that scikit-learn, scipy and torchao are absent, as ranks tell it
    (worker/lean_imports.py: imports of features a trace does not use, torchao's failed kernel
    loads among them), and the libraries' warnings that its user cannot act on left out: their
    deprecation warnings, UNACTIONABLE_WARNINGS and UNACTIONABLE_LOGS."""
    from ..worker.lean_imports import skip_unused_imports

    drops = [(logging.getLogger(name), _Drop(words)) for name, words in UNACTIONABLE_LOGS.items()]
    with warnings.catch_warnings():
        for category in (DeprecationWarning, FutureWarning):
            warnings.filterwarnings("ignore", category=category, module=LIBRARY_MODULES)
        for category, message, module in UNACTIONABLE_WARNINGS:
            warnings.filterwarnings("ignore", message, category, module)
        for logger, drop in drops:
            logger.addFilter(drop)
        try:
            skip_unused_imports()
            yield
        finally:
            for logger, drop in drops:
                logger.removeFilter(drop)


def _activation(p: PeakPrediction) -> float:
    return p.parts["activations"] + p.parts["temporaries"]


def _largest_batch(at_batch: PeakPrediction, batch: int, capacity: float) -> tuple[float, int]:
    """(GB per sequence, the largest batch that fits on a GPU sold with `capacity` GB): the end of
    forward grows with the batch (activations, temporaries, taken as proportional to it, as the
    batch search takes them: peak_model.largest_batch), the optimizer step and the end of backward
    do not. A second trace at batch 1 for a fixed share gave the same largest batch for every
    strategy of llama-1b on H100 and llama-7b on 8 x 80 GiB at 4096 tokens (2026-11-26), at twice
    the time."""
    usable = fit.allocatable_gb(fit.cuda_total_gb(capacity))
    return _activation(at_batch) / batch, at_batch.largest_batch(batch, usable)


def format_table(req: PlanRequest, rows: list[PlanRow]) -> str:
    title = f"{req.model} on {req.gpus} x {req.gpu_name} ({req.capacity:.1f} GB each)"
    device = fit.cuda_total_gb(req.capacity)
    usable = fit.allocatable_gb(device)
    lines = [
        f"{title}, batch {req.batch} x {req.seq_len} tokens per GPU",
        "",
        f"{'strategy':<15}{'states':>8}{'activ.':>8}{'temp.':>8}{'buffers':>9}{'alloc.':>8}{'reserved':>10}"
        f"  {'fits':<5}{'largest batch':>14}",
    ]
    for r in rows:
        p = r.prediction
        parts = p.parts
        lines.append(
            f"{r.strategy:<15}{parts['model_states']:>8.2f}{parts['activations']:>8.2f}{parts['temporaries']:>8.2f}"
            f"{parts['buffers']:>9.2f}{p.allocated_gb:>8.2f}{p.reserved_gb:>10.2f}  "
            f"{_verdict(p.allocated_gb, device, p.fits(device)):<5}"
            f"{r.largest_batch:>14}"
        )
    lines += [
        "",
        "GB per GPU (1e9 bytes). Predicted peak: model states resident at the end of forward, a traced",
        f"step's activations and temporaries, the strategy's buffers; reserved = allocated x "
        f"{RESERVED_OVER_ALLOCATED}, what the",
        "allocator keeps with memory to spare (near the limit it hands its cache back). alloc. is the",
        f"largest of the step's phases. Fits: alloc. within {usable:.1f} GB, the {device:.1f} GB CUDA "
        f"reports less {fit.OUTSIDE_ALLOCATOR_GB} GB",
        f"held outside the allocator (context, kernels, NCCL) and {fit.FRAGMENTATION:.0%} for "
        "fragmentation (analysis/fit.py).",
        "Checked against every measured GPU run in the repository's docs/results: the table and its figures",
        "in docs/results/2026-11-28-peak-prediction-zero3 (tools/peak_table.py remakes them).",
    ]
    near = [r.strategy for r in rows if fit.close(r.prediction.allocated_gb, device)]
    if near:
        lines.append(
            f"close ({', '.join(near)}): within {fit.NEAR:.0%} of the {usable:.1f} GB, where the "
            "prediction's own error can turn the answer either way: run it to know."
        )
    return "\n".join(lines)


def _verdict(allocated_gb: float, device_gb: float, fits: bool) -> str:
    """yes, no, or close: too near the limit for the prediction to tell (fit.close)."""
    if fit.close(allocated_gb, device_gb):
        return "close"
    return "yes" if fits else "no"


def plot(rows: list[PlanRow], capacity: float, title: str, path: Path) -> None:
    """Stacked parts per strategy against the GPU's memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [r.strategy for r in rows]
    bottom = [0.0] * len(rows)
    for part in ("model_states", "activations", "temporaries", "buffers"):
        values = [r.prediction.parts[part] for r in rows]
        ax.bar(names, values, bottom=bottom, label=part.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.axhline(
        fit.allocatable_gb(fit.cuda_total_gb(capacity)), color="black", linestyle="--",
        label="fits below (allocated)",
    )  # fmt: skip
    ax.set_ylabel("predicted peak allocated per GPU (GB)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    plt.xticks(rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
