"""A rank tells transformers that scikit-learn is absent before it imports a model class:
transformers 5.17 imports scikit-learn (and pandas and scipy.stats with it) with its generation
module wherever it is installed, 1.5 s of a fresh rank's imports on the 1x H100 image."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("transformers")

ASK = """
from transformers.utils import is_sklearn_available
print(is_sklearn_available())  # installed: transformers would import it with its generation
from llmbench_pytest.worker.lean_imports import skip_unused_imports
print(skip_unused_imports())
from transformers.generation import candidate_generator
print(candidate_generator.is_sklearn_available())
"""


def _fake_sklearn(root):
    """An installed scikit-learn as transformers' check sees one (a module and its metadata)."""
    (root / "sklearn").mkdir()
    (root / "sklearn" / "__init__.py").write_text("")
    info = root / "scikit_learn-1.5.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scikit-learn\nVersion: 1.5.0\n")
    (info / "top_level.txt").write_text("sklearn\n")


def test_transformers_generation_sees_no_sklearn_in_a_rank(tmp_path):
    _fake_sklearn(tmp_path)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", ASK], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    installed, changed, generation_sees = done.stdout.split()
    assert (installed, changed, generation_sees) == ("True", "True", "False")


def test_too_late_once_generation_is_imported():
    import transformers.generation.candidate_generator  # noqa: F401

    from llmbench_pytest.worker.lean_imports import skip_unused_imports

    assert skip_unused_imports() is False  # nothing left to save, and nothing changed
