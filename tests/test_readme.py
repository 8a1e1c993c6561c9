"""The README documents every option the plugin has, and ships with it: `llmbench readme`."""

import ast
import re
import subprocess
import sys

import pytest

from conftest import REPO
from llmbench_pytest import readme
from llmbench_pytest.config.hardware import Hardware
from llmbench_pytest.config.options import SETTINGS, SessionOptions
from llmbench_pytest.launch.matrix import build_matrix


def test_every_option_is_in_the_readme():
    readme = (REPO / "README.md").read_text()
    missing = [s.option for s in SETTINGS if s.option not in readme]
    assert not missing, f"README.md does not document {missing}"


def _llmbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", *args], capture_output=True, text=True, check=False
    )


def test_llmbench_readme_prints_one_section_down_to_the_next_of_its_level():
    done = _llmbench("readme", "validation checks")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("## Validation checks\n")
    assert "llmbench.validate(result)" in done.stdout
    assert "\n## " not in done.stdout  # the next section is left out
    whole = _llmbench("readme").stdout
    assert whole == (REPO / "README.md").read_text() and done.stdout in whole


def test_an_unknown_section_is_refused_with_the_sections_there_are():
    done = _llmbench("readme", "no such section")
    assert done.returncode == 2 and done.stdout == ""
    assert "no section of the README is titled like 'no such section'" in done.stderr
    assert "  Quick start\n" in done.stderr and "  Validation checks\n" in done.stderr


def test_a_hash_line_in_a_code_block_is_not_a_heading():
    text = "# tool\n## Run\n```bash\n# a comment\nrun it\n```\n### Detail\nmore\n## Next\nother\n"
    assert readme.headings(text) == ["tool", "Run", "Detail", "Next"]
    assert readme.section(text, "run") == "## Run\n```bash\n# a comment\nrun it\n```\n### Detail\nmore\n"
    with pytest.raises(readme.ReadmeError, match="its sections:\n  tool\n  Run"):
        readme.section(text, "absent")


def _markers() -> dict[str, dict]:
    """Each benchmark file's `@pytest.mark.llmbench(...)` settings, as the plugin reads them (none:
    the session's, as test_pretrain.py has)."""
    found = {}
    for path in sorted((REPO / "benchmarks").glob("test_*.py")):
        found[path.name] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.llmbench":
                found[path.name] = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    return found


@pytest.mark.parametrize(("gpus", "sizes"), [(4, [1, 2, 4]), (8, [1, 2, 4, 8])])
def test_the_configuration_counts_the_readme_gives_for_a_gpu_node_are_the_suites(gpus, sizes):
    """*Several GPUs and nodes*: "26 configurations per world size on a GPU node ... 78 at world
    sizes 1, 2 and 4 and 104 at 1, 2, 4 and 8, of which zero3_nvme's (one per world size) are
    skipped ...: 75 and 100 train", which the time estimates multiply. The matrix the plugin
    builds from the benchmark files' markers, on a node of that many H100s (no GPU needed)."""
    text = " ".join(readme.section((REPO / "README.md").read_text(), "Several GPUs and nodes").split())
    per_size = int(re.search(r"The default suite is (\d+) configurations per world size", text)[1])
    collected = re.search(r"That is (\d+) at world sizes 1, 2 and 4 and (\d+) at 1, 2, 4 and 8", text)
    trained = re.search(r"(\d+) and (\d+) train", text)
    assert collected and trained, text
    column = 0 if gpus == 4 else 1
    hw = Hardware(device="cuda", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=gpus, device_gib=79.2, bf16=True,
                  cpu_cores=64, compute_capability=(9, 0))  # fmt: skip
    markers = _markers()
    assert len(markers) == 4, markers  # pre-training, LoRA, the LoRA diagnostic, encoder-decoder
    entries = [
        e
        for m in markers.values()
        for e in build_matrix(SessionOptions().with_values(m, "marker"), hw, sizes, launched=True)
    ]
    assert len(entries) == per_size * len(sizes) == int(collected[column + 1]), [e.id for e in entries]
    nvme = [e for e in entries if e.spec is None and e.skip and "zero3_nvme" in e.skip]
    assert len(nvme) == len(sizes) and len(entries) - len(nvme) == int(trained[column + 1])
    if gpus == 8:  # the table's row for the node that was not measured
        assert f"| 8 GPUs | `pytest benchmarks/`, {trained[2]} configurations | not measured |" in text
