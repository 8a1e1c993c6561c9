"""Where Python writes no bytecode and torch carries none, every new process compiles torch's
modules again (14.7 s of a first llama-1b rank on 1x H100): the session's header says so with
the command that ends it, and says nothing where the bytecode is there or Python writes it."""

from __future__ import annotations

import os
import subprocess
import sys

ASK = "from llmbench_pytest.config.bytecode import uncached_bytecode_note as n; print(n('pkg_without_pyc'))"


def _note(tmp_path, *flags: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [sys.executable, *flags, "-c", ASK], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_package_compiled_in_every_process_is_named_with_the_command_that_ends_it(tmp_path):
    package = tmp_path / "pkg_without_pyc"
    package.mkdir()
    (package / "__init__.py").write_text("X = 1\n")
    note = _note(tmp_path, "-B")  # -B: what PYTHONDONTWRITEBYTECODE=1 does
    assert "pkg_without_pyc's modules anew in every process" in note, note
    assert note.endswith(f"-m compileall -q -j 0 {tmp_path}"), note
    assert not (package / "__pycache__").exists()  # the question imported nothing
    assert _note(tmp_path) == "None"  # Python writes the bytecode: only the first process pays
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tmp_path)], check=True)
    assert _note(tmp_path, "-B") == "None"  # the fix it names ends the note
