"""The README is a page a newcomer reads in minutes, the docs answer one question a page, every link
resolves, the options reference is the options' own definitions, and `llmbench readme` prints any
section of them."""

import ast
import re
import subprocess
import sys

import pytest

from conftest import REPO
from llmbench_pytest import options_doc, readme
from llmbench_pytest.config.hardware import Hardware
from llmbench_pytest.config.options import SETTINGS, SessionOptions, Setting
from llmbench_pytest.launch.matrix import build_matrix


def test_the_options_reference_is_what_the_definitions_generate():
    """docs/options.md is options_doc's output (regenerate: python -m llmbench_pytest.options_doc),
    one row per setting, in the order the plugin defines them."""
    page = (REPO / "docs" / "options.md").read_text()
    assert page == options_doc.markdown(), (
        "docs/options.md drifted: run python -m llmbench_pytest.options_doc"
    )
    rows = [line.split("|")[1].strip(" `") for line in page.splitlines() if line.startswith("| `--llmbench-")]
    assert rows == [s.option for s in SETTINGS]
    assert options_doc.main(["--check"]) == 0


def test_an_option_added_or_reworded_without_regenerating_fails_the_check(tmp_path, capsys):
    stale = tmp_path / "options.md"
    stale.write_text(options_doc.markdown(SETTINGS[:-1]))  # the page before the last option was added
    assert options_doc.main(["--check", "--out", str(stale)]) == 1
    assert (
        "differs from the options' definitions: run python -m llmbench_pytest.options_doc"
        in capsys.readouterr().err
    )
    reworded = Setting(SETTINGS[0].name, "another text", SETTINGS[0].parse, SETTINGS[0].metavar)
    assert options_doc.markdown((reworded, *SETTINGS[1:])) != options_doc.markdown()
    # a | in a help text does not split its cell
    piped = Setting("x", "a|b", str, "A|B")
    assert len(re.split(r"(?<!\\)\|", options_doc._row(piped))) == 7, options_doc._row(piped)  # 5 cells


def _llmbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", *args], capture_output=True, text=True, check=False
    )


def test_llmbench_readme_prints_one_section_down_to_the_next_of_its_level():
    done = _llmbench("readme", "the first run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("### The first run\n")
    assert "pytest benchmarks/test_pretrain.py" in done.stdout
    assert "\n## " not in done.stdout  # the next section is left out
    whole = _llmbench("readme").stdout
    assert whole == (REPO / "README.md").read_text() and done.stdout in whole
    # a section of a docs page: the checks page, whole, as the README's link sends a reader to it
    checks = _llmbench("readme", "validation checks")
    assert checks.returncode == 0 and checks.stdout == (REPO / "docs" / "checks.md").read_text()
    assert "llmbench.validate(result)" in checks.stdout


def test_an_unknown_section_is_refused_with_the_sections_there_are():
    done = _llmbench("readme", "no such section")
    assert done.returncode == 2 and done.stdout == ""
    assert "no section of the README or docs is titled like 'no such section'" in done.stderr
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
    """docs/gpus-and-nodes.md: "26 configurations per world size on a GPU node ... 78 at world
    sizes 1, 2 and 4 and 104 at 1, 2, 4 and 8. Skipped ...: zero3_nvme's ... and above world size 1
    the questions of one GPU ...: 57 and 73 train", which the time estimates multiply. The matrix
    the plugin builds from the benchmark files' markers, on a node of that many H100s (no GPU
    needed); a run skipped only for bitsandbytes, missing here, counts as one that trains."""
    page = (REPO / "docs" / "gpus-and-nodes.md").read_text()
    text = " ".join(readme.section(page, "One node with 2, 4 or 8 GPUs").split())
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
    train = [e for e in entries if e.spec is not None or "bitsandbytes" in (e.skip or "")]
    assert len(nvme) == len(sizes) and len(train) == int(trained[column + 1]), [e.id for e in train]
    if gpus == 8:  # the table's row for the node that was not measured
        assert f"| 8 GPUs | `pytest benchmarks/`, {trained[2]} configurations | not measured;" in text
