"""Runs inside each rank: DeepSpeed ZeRO stages 0-3, with CPU and NVMe offload.

The only module that imports deepspeed. The config it builds is what a well-informed user would
write: DeepSpeed's own guidance for its buckets, prefetch and persistence, scaled down to a model
smaller than the guidance assumes (config/strategy_settings.py says which and why), torch's fused
AdamW where no offload asks for DeepSpeed's CPU Adam, and the precision the run asked for; then
the user's own file (--llmbench-deepspeed-config) and the settings' axes over it. The config, and
where each setting came from, is recorded with every result.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any

from ...config import deepspeed_user
from ...config.learning_rate import ADAM_BETAS
from ...config.strategy_settings import axis_settings, merge, zero_defaults
from ..faults import zero_stage
from ..techniques import close_techniques
from .base import compile_blocks, make_optimizer
from .lr_schedule import LrSchedule

if TYPE_CHECKING:
    import torch

    from ...config.spec import RunSpec
    from ..built import BuiltModel
    from ..dist import DistContext

# DeepSpeed's op builder parses TORCH_CUDA_ARCH_LIST entries as integers and so rejects the
# arch-specific suffixes PyTorch accepts ("9.0a" for Hopper: deepspeedai/DeepSpeed#7589). Its kernels
# use nothing sm_90a-only, so the plain architecture builds code that runs on the same GPU.
_ARCH_SUFFIX = re.compile(r"^(\d+\.\d+)[a-z]+(\+PTX)?$")


def deepspeed_safe_arch_list(value: str | None) -> str | None:
    """TORCH_CUDA_ARCH_LIST with arch suffixes dropped ("9.0a;10.0f+PTX" -> "9.0;10.0+PTX")."""
    if not value:
        return value
    entries = [e for e in re.split(r"[;\s]+", value.strip()) if e]
    fixed = []
    for entry in entries:
        m = _ARCH_SUFFIX.match(entry)
        fixed.append(m.group(1) + (m.group(2) or "") if m else entry)
    out: list[str] = []
    for entry in fixed:
        if entry not in out:
            out.append(entry)
    return ";".join(out)


def model_params(spec: RunSpec) -> int:
    """The parameter count the ZeRO defaults scale with: the preset's recorded count, else the
    model's as the step trace builds it, without memory (cached: a rank that predicts its peak has
    traced it already), so that `llmbench plan` and the rank size the same config."""
    from ...config.presets import resolve_model

    preset = resolve_model(spec.model, spec.model_config)
    if preset.params:
        return int(preset.params)
    from ..step_trace import trace_step

    return trace_step(spec, preset).params


def zero_settings(spec: RunSpec, stage: int, hidden_size: int, params: int) -> dict[str, dict[str, Any]]:
    """Each ZeRO bucket and threshold the run sets, with where its value came from: the suite's
    default for the model's size (config/strategy_settings.zero_defaults), the user's file, or a
    settings axis off its default, each over the one before."""
    out = {k: {"value": v, "from": "default"} for k, v in zero_defaults(stage, params, hidden_size).items()}
    user = deepspeed_user.user_settings(spec.deepspeed_config).get("zero_optimization") or {}
    for key, value in user.items():
        if key in out:
            out[key] = {"value": value, "from": spec.deepspeed_config_file}
    for key, value in axis_settings(spec.to_dict(), stage, hidden_size).items():
        out[key] = {"value": value, "from": "axis"}
    return out


def build_config(
    spec: RunSpec, hidden_size: int, device: torch.device, params: int | None = None
) -> dict[str, Any]:
    """The DeepSpeed config the run trains with: the suite's defaults for the model's size
    (`params`: model_params(spec) where not given), the user's file merged over them, the settings'
    axes over both (zero_settings). Needs no GPU: llmbench plan sizes ZeRO's buffers from it."""
    assert spec.info.zero_stage is not None
    stage = zero_stage(spec, spec.info.zero_stage)  # a test's injected fault may change it
    params = model_params(spec) if params is None else params
    settings = zero_settings(spec, stage, hidden_size, params)
    zero: dict[str, Any] = {
        "stage": stage,
        "contiguous_gradients": True,
        "overlap_comm": device.type == "cuda",
    }
    pin = device.type == "cuda"
    if spec.offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
        if stage == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    elif spec.offload == "nvme":
        nvme = {"device": "nvme", "nvme_path": spec.nvme_path, "pin_memory": pin}
        zero["offload_optimizer"] = dict(nvme)
        zero["offload_param"] = dict(nvme)

    adam: dict[str, Any] = {"lr": spec.lr, "betas": list(ADAM_BETAS), "eps": 1e-8, "weight_decay": 0.0}
    if spec.offload == "none":
        # torch's AdamW needs no JIT-built op; fused on GPU is as fast as DeepSpeed's FusedAdam
        adam["torch_adam"] = True
        if device.type == "cuda":
            adam["fused"] = True
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": spec.per_device_batch,
        "gradient_accumulation_steps": spec.grad_accum,
        "train_batch_size": spec.per_device_batch * spec.grad_accum * spec.world_size,
        "optimizer": {"type": "AdamW", "params": adam},
        "zero_optimization": zero,
        "gradient_clipping": 0.0,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if spec.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif spec.dtype == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    if spec.offload == "nvme":
        config["aio"] = {
            "block_size": 1 << 20,
            "queue_depth": 8,
            "single_submit": False,
            "overlap_events": True,
        }
    config = merge(config, deepspeed_user.user_settings(spec.deepspeed_config))
    config["zero_optimization"].update({key: s["value"] for key, s in settings.items()})
    return config


class DeepSpeedStrategy:
    def setup(self, built: BuiltModel, spec: RunSpec, ctx: DistContext) -> None:
        self.arch_list_before = os.environ.get("TORCH_CUDA_ARCH_LIST")
        safe = deepspeed_safe_arch_list(self.arch_list_before)
        if safe != self.arch_list_before and safe is not None:
            os.environ["TORCH_CUDA_ARCH_LIST"] = safe
        # DeepSpeed picks its accelerator at import; make it match the device this run uses
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if ctx.device.type == "cuda" else "cpu")
        import deepspeed
        from deepspeed.utils import logger as ds_logger

        ds_logger.setLevel(logging.WARNING)
        self.built, self.spec = built, spec
        # ZeRO-3 replaces torch.nn.functional.linear with DeepSpeed's own for the whole process and
        # never puts it back: this run uses it as DeepSpeed means it to; close() restores torch's,
        # or every later configuration on a warm rank would run DeepSpeed's linear too
        from torch.nn import functional

        self.linear_before = functional.linear
        self.compiled = compile_blocks(built) if spec.compile else 0
        self.config = build_config(spec, built.hidden_size, ctx.device)
        stage = self.config["zero_optimization"]["stage"]
        self.settings = zero_settings(spec, stage, built.hidden_size, model_params(spec))
        client = None
        if spec.optimizer != "adamw_torch":  # bitsandbytes' paged 8-bit AdamW replaces DeepSpeed's
            client = make_optimizer(built.module.parameters(), spec, ctx.device)
            self.config.pop("optimizer")
        # the default process group already exists; DeepSpeed joins it instead of making one
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=built.module,
            model_parameters=[p for p in built.module.parameters() if p.requires_grad],
            optimizer=client,
            config=self.config,
            dist_init_required=False,
        )
        self.version = deepspeed.__version__
        # a user's config that names a scheduler keeps it (DeepSpeed steps it in engine.step())
        own = "scheduler" not in self.config
        self.lr = LrSchedule(self.optimizer, spec.lr, spec.lr_warmup, enabled=own)

    def micro_step(self, input_ids: torch.Tensor, last: bool) -> torch.Tensor:
        # DeepSpeed counts micro-steps itself: backward scales by 1/accumulation and step()
        # must run after every micro-step; it applies the optimizer only at the boundary, so the
        # boundary's step() waits for optimizer_step()
        loss = self.built.loss(self.engine, input_ids)
        self.engine.backward(loss)
        if not last:
            self.engine.step()
        return loss.detach()

    def optimizer_step(self) -> None:
        self.lr.before_update()
        self.engine.step()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "wrapper": "deepspeed.initialize",
            "deepspeed_version": self.version,
            "zero_optimizer": type(self.optimizer).__name__,
            "deepspeed_config": self.config,
            "learning_rate": self.lr.describe(),
            # the settings that move its speed and memory, and whose they are (default, file, axis)
            "settings": self.settings,
            "deepspeed_config_file": self.spec.deepspeed_config_file,
            "compiled_blocks": self.compiled,
            # gradients DeepSpeed reduces outside its buckets, which ZeRO-1 holds until its epilogue
            # (analysis/memory_model.InFlight): counted here rather than estimated from the shapes
            "params_above_bucket": self._params_above_bucket(),
        }
        from torch.nn import functional

        from ..process_settings import describe

        if functional.linear is not self.linear_before:
            out["replaced_for_this_run"] = {
                "torch.nn.functional.linear": describe(functional.linear),
                "restored_after": True,
            }
        if os.environ.get("TORCH_CUDA_ARCH_LIST") != self.arch_list_before:
            out["torch_cuda_arch_list"] = {
                "given": self.arch_list_before,
                "used": os.environ.get("TORCH_CUDA_ARCH_LIST"),
                "why": "DeepSpeed's op builder rejects arch suffixes such as 9.0a "
                "(deepspeedai/DeepSpeed#7589)",
            }
        return out

    def _params_above_bucket(self) -> int:
        bucket = int(self.config["zero_optimization"].get("reduce_bucket_size") or 0)
        sizes = (getattr(p, "ds_numel", p.numel()) for p in self.built.module.parameters() if p.requires_grad)
        return sum(n for n in sizes if n > bucket)

    def close(self) -> None:
        close_techniques(getattr(self, "built", None))
        before = getattr(self, "linear_before", None)
        if before is not None:
            from torch.nn import functional

            functional.linear = before
        engine = getattr(self, "engine", None)
        if engine is not None:
            module, optimizer = engine.module, getattr(engine, "optimizer", None)
            if hasattr(engine, "destroy"):
                engine.destroy()  # removes its hooks so the module and buffers can be freed
            _drop_storage(module, optimizer)
        self.engine = self.optimizer = None


def _drop_storage(module: torch.nn.Module, optimizer: Any) -> None:
    """Free what a closed engine's objects hold, whoever still holds the objects.

    ZeRO-3's engine stays reachable after destroy(): DeepSpeed's FWD_MODULE_STACK (a module-level
    list) keeps the model, and references from C++ (hooks) keep the rest, which gc cannot see.
    On 1x H100 (llama-1b, 2026-11-24) a warm rank kept 15.25 GB after zero3: its fp32 master, both
    Adam moments and the bf16 partitions. Emptying the tensors and the optimizer leaves only small
    Python objects behind, so the next configuration on a warm rank starts as a fresh one does."""
    import torch
    from deepspeed.runtime.zero import parameter_offload

    parameter_offload.FWD_MODULE_STACK.clear()
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.grad = None
            for held in (tensor, getattr(tensor, "ds_tensor", None)):  # ZeRO-3 keeps the shard apart
                if held is not None:
                    held.data = torch.empty(0, dtype=held.dtype, device=held.device)
    inner = getattr(optimizer, "optimizer", None)  # the torch (or CPU Adam) optimizer ZeRO wraps
    if inner is not None and hasattr(inner, "state"):
        inner.state.clear()
    if optimizer is not None:
        vars(optimizer).clear()  # ZeRO's flat partitions and buffers; nothing calls it again
