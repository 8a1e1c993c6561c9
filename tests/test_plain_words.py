"""What a user reads says what things are, in no word of the project's own history.

The project grew from specification documents it called "seed 000", "seed 001" and "seed 003", and
from numbered issues; its package folders were "rooms". None of these names means anything to a
user: the README and docs/*.md, `pytest --help`, `llmbench --help` (and each command's) and the
report's fixed texts say what they stand for (the validation checks, the LoRA fine-tuning guide, the
encoder-decoder benchmark). Upstream bugs are named by repository, `pytorch/pytorch#185449`.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import subprocess
import sys

import pytest

from conftest import CHILD_UNSET, REPO

INTERNAL = re.compile(r"\bseed[ -]?00\d\b|\bissues? \d+\b|\brooms?\b", re.IGNORECASE)
SUBCOMMANDS = ("report", "compare", "gate", "ops", "plan", "readme")


def _internal_words(text: str) -> list[str]:
    """Each internal word in TEXT with a little context; lines wrapped by a help formatter are
    joined first, so a word split over two lines is found too."""
    flat = " ".join(text.split())
    return [flat[max(m.start() - 40, 0) : m.end() + 40] for m in INTERNAL.finditer(flat)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # the plugin's help comes through its entry point
    return env


def _run(args: list[str], cwd: os.PathLike[str] | str) -> str:
    proc = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _llmbench_help(*command: str) -> str:
    return _run([sys.executable, "-m", "llmbench_pytest.cli", *command, "--help"], REPO)


def test_the_readme_uses_plain_words():
    found = _internal_words((REPO / "README.md").read_text())
    assert not found, f"README.md uses the project's internal words: {found}"


def test_the_docs_use_plain_words():
    """docs/*.md, where the README sends a user for the details (docs/results/ holds measurement
    records, each with the command and date it was taken: those are not checked)."""
    pages = sorted((REPO / "docs").glob("*.md"))
    assert pages, "no docs/*.md to read"
    found = [f"{p.relative_to(REPO)}: {w}" for p in pages for w in _internal_words(p.read_text())]
    assert not found, f"the docs use the project's internal words: {found}"


def test_pytest_help_uses_plain_words(tmp_path):
    out = _run([sys.executable, "-m", "pytest", "--help"], tmp_path)
    assert "--llmbench-strategies" in out, "the llmbench plugin's options are not in pytest --help"
    found = _internal_words(out)
    assert not found, f"pytest --help uses the project's internal words: {found}"


@pytest.mark.parametrize(
    "command", [(), *((c,) for c in SUBCOMMANDS)], ids=lambda c: " ".join(c) or "llmbench"
)
def test_llmbench_help_uses_plain_words(command):
    found = _internal_words(_llmbench_help(*command))
    assert not found, f"llmbench {' '.join(command)} --help uses the project's internal words: {found}"


def test_report_texts_use_plain_words():
    """The report's fixed texts: every string literal under llmbench_pytest/report/ that is not a
    docstring (docstrings and comments are for the code's readers)."""
    found = []
    for path in sorted((REPO / "llmbench_pytest" / "report").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        # a string right after an assignment documents the name (an attribute docstring)
        for node in ast.walk(tree):
            for block in ("body", "orelse"):
                stmts = getattr(node, block, None)
                if not isinstance(stmts, list):
                    continue
                for before, after in itertools.pairwise(stmts):
                    if (
                        isinstance(before, (ast.Assign, ast.AnnAssign))
                        and isinstance(after, ast.Expr)
                        and isinstance(after.value, ast.Constant)
                    ):
                        docstrings.add(id(after.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {w}" for w in _internal_words(node.value)]
    assert not found, f"the report's texts use the project's internal words: {found}"


def test_llmbench_help_says_how_benchmarks_run_and_where_to_read_more():
    out = " ".join(_llmbench_help().split())
    for words in (
        "pytest benchmarks/",
        "torchrun --nproc_per_node=8 -m pytest benchmarks/ -k zero2",
        "pytest --help",
        "llmbench plan",
        "README",
    ):
        assert words in out, f"llmbench --help does not say {words!r}:\n{out}"
    # a pip-installed package has no docs/ folder to point at
    assert "docs/" not in out, f"llmbench --help points at a file that does not ship:\n{out}"


def test_the_code_and_its_comments_use_plain_words():
    """Docstrings and comments too: the next maintainer knows no more of the project's history
    than a user does. The plugin, the benchmarks and the tools, line by line."""
    found = []
    for folder, pattern in (
        ("llmbench_pytest", "*.py"),
        ("benchmarks", "*.py"),
        ("tools", "*.py"),
        ("tools", "*.sh"),
    ):
        for path in sorted((REPO / folder).rglob(pattern)):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                found += [f"{path.relative_to(REPO)}:{n}: {w}" for w in _internal_words(line)]
    assert not found, f"the code uses the project's internal words: {found}"
