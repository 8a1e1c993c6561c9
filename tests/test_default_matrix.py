"""The default suite answers each question once: the LoRA diagnostic matrix and the encoder-decoder's
second data source run at world size 1 only, unless the user asks for every size
(--llmbench-every-size) or names the world sizes. Built from the benchmark files' own markers on a
4-GPU node (no GPU needed: the matrix reads only the hardware's description)."""

from __future__ import annotations

import ast

import pytest

from conftest import REPO
from llmbench_pytest.config.hardware import Hardware
from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.launch.matrix import build_matrix

NODE = Hardware(
    device="cuda", gpu_name="NVIDIA H200", gpu_count=4, device_gib=139.8, bf16=True, cpu_cores=64,
    compute_capability=(9, 0),
)  # fmt: skip
SIZES = [1, 2, 4]


def _marker(name: str) -> dict[str, object]:
    tree = ast.parse((REPO / "benchmarks" / name).read_text())
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "pytest.mark.llmbench"
    ]
    return {k.arg: ast.literal_eval(k.value) for c in calls for k in c.keywords}  # none: the defaults


def _entries(bench: str, cli: dict[str, str] | None = None) -> dict[str, str | None]:
    """Test id -> skip reason (None: it trains) of one benchmark file, as the plugin builds it."""
    opts = SessionOptions().with_values(_marker(bench), "marker").with_values(cli or {}, "command line")
    sizes = list(opts.world_sizes or SIZES)
    return {e.id: e.skip for e in build_matrix(opts, NODE, sizes, launched=True)}


def test_the_diagnostic_matrix_runs_at_world_size_1_by_default():
    found = _entries("test_lora_diagnostic.py")
    trained = [i for i, skip in found.items() if skip is None]
    assert trained and all("-ws1-" in i for i in trained), trained
    held = [skip for i, skip in found.items() if "-ws1-" not in i]
    assert len(held) == 2 * len(found) // 3, found  # all six variants, at 2 and at 4
    assert all("runs at world size 1 by default" in s and "--llmbench-every-size" in s for s in held), held


def test_the_second_data_source_runs_at_world_size_1_by_default():
    found = _entries("test_encoder_decoder.py")
    disk = {i: s for i, s in found.items() if i.endswith("-disk")}
    memory = {i: s for i, s in found.items() if i.endswith("-memory")}
    assert len(disk) == len(memory) == 3 * len(SIZES), found  # ddp, fsdp, zero2 at 1, 2, 4
    assert all(s is None for s in memory.values()), memory
    assert [i for i, s in disk.items() if s is None] == [i for i in disk if "-ws1-" in i]
    assert all("disk data source runs at world size 1" in s for i, s in disk.items() if "-ws1-" not in i)


@pytest.mark.parametrize(
    "cli", [{"every_size": "true"}, {"world_sizes": "1,2,4"}], ids=["every-size", "sizes-named"]
)
def test_asking_for_every_size_runs_them_everywhere(cli):
    for bench in ("test_lora_diagnostic.py", "test_encoder_decoder.py"):
        found = _entries(bench, cli)
        assert any("-ws4-" in i for i in found), found
        assert all(s is None or "world size 1 by default" not in s for s in found.values()), found


def test_other_benchmarks_run_at_every_size():
    for bench in ("test_pretrain.py", "test_finetune_lora.py"):
        held = [s for s in _entries(bench).values() if s and "world size 1 by default" in s]
        assert not held, held
