"""A rank tells transformers that scikit-learn, scipy and torchao are absent before it imports a
model class: transformers imports them with its modules wherever they are installed, for features
no benchmark uses (worker/lean_imports.py): scikit-learn was 1.5 s of a fresh rank's imports on the
1x H100 image with transformers 5.17, scipy.optimize 0.5 s and torchao 0.33 s."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

# argv: "plain" or "lean", then the installed packages to look for in sys.modules
IMPORT_A_MODEL = """
import sys
from transformers.utils import is_sklearn_available
print(is_sklearn_available())  # installed: transformers would import it with its generation
from llmbench_pytest.worker.lean_imports import skip_unused_imports
if sys.argv[1] == "lean":
    print(skip_unused_imports())
import transformers.models.llama.modeling_llama
from transformers.generation import candidate_generator
print(candidate_generator.is_sklearn_available())
print(*(name in sys.modules for name in sys.argv[2:]))
if sys.argv[1] == "plain":
    print(skip_unused_imports())  # every module that asks is imported: too late, nothing changed
"""


def _fake_sklearn(root):
    """An installed scikit-learn as transformers' check sees one (a module and its metadata)."""
    (root / "sklearn").mkdir()
    (root / "sklearn" / "__init__.py").write_text("")
    # what transformers 5.17's generation imports from it where the check says yes
    (root / "sklearn" / "metrics.py").write_text(
        "def roc_curve(*args, **kwargs):\n    raise NotImplementedError\n"
    )
    info = root / "scikit_learn-1.5.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scikit-learn\nVersion: 1.5.0\n")
    (info / "top_level.txt").write_text("sklearn\n")


def _import_a_model(mode: str, installed: list[str], env: dict[str, str]) -> list[str]:
    argv = [sys.executable, "-c", IMPORT_A_MODEL, mode, *installed]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split("\n")


def test_a_rank_imports_none_of_them_with_a_model_class(tmp_path):
    """The same imports with and without the answers, in new processes (this one's transformers
    keeps its own): without them transformers does use what is installed, so the check can fail."""
    _fake_sklearn(tmp_path)
    # the fake first, then wherever this process finds the real packages (a GPU host's wheels)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    installed = [name for name in ("scipy", "torchao") if importlib.util.find_spec(name) is not None]
    imported_plain = " ".join(["True"] * len(installed))
    imported_none = " ".join(["False"] * len(installed))
    # installed; generation sees it; each package imported; then too late to change anything
    assert _import_a_model("plain", installed, env)[:4] == ["True", "True", imported_plain, "False"]
    # installed; answers changed; generation sees no scikit-learn; none of the packages imported
    assert _import_a_model("lean", installed, env)[:4] == ["True", "True", "False", imported_none]
