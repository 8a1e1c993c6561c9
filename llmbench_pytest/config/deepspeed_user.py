"""A user's own DeepSpeed config (--llmbench-deepspeed-config FILE), read and checked before anything
trains. Standard library only.

The file is merged over the suite's defaults for every DeepSpeed configuration
(worker/strategies/deepspeed_zero.build_config), and recorded with each result. What the suite
controls for every strategy alike (batch, accumulation, precision, the optimizer, where state is
offloaded, the ZeRO stage each strategy is named for) is refused in one line that names the option
to use instead: a file that changed them would compare its DeepSpeed runs with DDP and FSDP runs
of another shape. The Hugging Face integration's "auto" placeholders are accepted and left to the
suite, so a file written for the HF Trainer works as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .spec import SpecError, parse_strategy

if TYPE_CHECKING:
    from collections.abc import Iterable

OPTION = "--llmbench-deepspeed-config"
BATCH = "--llmbench-batch, --llmbench-grad-accum and the world size decide it"
PRECISION = "--llmbench-dtype decides it"
CONTROLLED: dict[tuple[str, ...], str] = {
    ("train_batch_size",): BATCH,
    ("train_micro_batch_size_per_gpu",): BATCH,
    ("gradient_accumulation_steps",): BATCH,
    ("bf16", "enabled"): PRECISION,
    ("bfloat16", "enabled"): PRECISION,
    ("fp16", "enabled"): PRECISION,
    ("amp", "enabled"): PRECISION,
    ("optimizer",): "every strategy trains with the same AdamW: --llmbench-optimizer and --llmbench-lr",
    ("scheduler",): "every strategy trains at a constant --llmbench-lr",
    ("zero_optimization", "offload_optimizer"): (
        "the strategy's name decides it: zero2_offload, zero3_offload, zero3_nvme (with --llmbench-nvme-path)"
    ),
    ("zero_optimization", "offload_param"): (
        "the strategy's name decides it: zero3_offload, zero3_nvme (with --llmbench-nvme-path)"
    ),
}
"""Keys the suite sets for every strategy alike, and what decides each instead."""


def load(raw: Any) -> tuple[str, str]:
    """(path, the file's settings as canonical JSON) for --llmbench-deepspeed-config; refuses a
    file that cannot be read, is not a JSON object, or sets what the suite controls."""
    path = Path(str(raw).strip()).expanduser()
    try:
        text = path.read_text()
    except OSError as exc:
        why = exc.strerror or exc
        raise SpecError(f"{str(path)!r} cannot be read ({why}): give a readable JSON file") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{str(path)!r} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): "
            "fix the file or drop the option"
        ) from None
    if not isinstance(config, dict):
        kind = type(config).__name__
        raise SpecError(
            f"{str(path)!r} holds a JSON {kind}, not an object of DeepSpeed settings: give an object"
        )
    config = drop_auto(config)
    for keys, instead in CONTROLLED.items():
        value = _at(config, keys)
        if value is not None:
            dotted = ".".join(keys)
            raise SpecError(
                f"{path.name} sets {dotted}={json.dumps(value)}, which the suite controls ({instead}): "
                f'remove "{keys[-1]}" from the file or write "auto"'
            )
    return str(path), json.dumps(config, sort_keys=True)


def _at(config: dict[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = config
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def check_stage(given: tuple[str, str] | None, strategies: Iterable[str]) -> None:
    """A stage in the file must be the stage of every DeepSpeed strategy selected."""
    if given is None:
        return
    path, text = given
    stage = (json.loads(text).get("zero_optimization") or {}).get("stage")
    if stage is None:
        return
    infos = [parse_strategy(name)[0] for name in strategies]
    other = [(i.name, i.zero_stage) for i in infos if i.family == "deepspeed" and i.zero_stage != stage]
    if other:
        name, runs = other[0]
        pick = f" or select only zero{stage} strategies" if stage in (0, 1, 2, 3) else ""
        raise SpecError(
            f"{OPTION} {Path(path).name} sets zero_optimization.stage={json.dumps(stage)} but {name} "
            f'runs stage {runs}: remove "stage" from the file (each strategy sets its own){pick}'
        )


def user_settings(text: str) -> dict[str, Any]:
    """The file's settings as RunSpec.deepspeed_config holds them ('' for none)."""
    return json.loads(text) if text else {}


def drop_auto(config: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face integration's "auto" placeholders removed (the suite fills those keys), with
    a section they leave empty, and whole numbers written as 5e8 read as the integers they are."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        kept = drop_auto(value) if isinstance(value, dict) else value
        if isinstance(kept, float) and kept.is_integer() and abs(kept) >= 1:
            kept = int(kept)
        if kept not in ("auto", {}):
            out[key] = kept
    return out
