"""Every package the code imports is declared in pyproject.toml, where its users get it.

A package that reaches the environment only through another one (numpy through torch, yaml
through transformers) works until that other package drops it, or until someone installs only
what we declare. The package's imports must be among `dependencies` (or an optional extra that only
the runs asking for it import); the tests' and tools' imports among `dependencies` plus the `test`
extra.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OWN = {"llmbench_pytest", "fixtures"} | {
    p.stem for folder in ("tests", "tools", "tools/gpu") for p in (REPO / folder).glob("*.py")
}
"""Our own modules: the package, its presets folder, and the tests and tools importing each other."""


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = {k: _requirement_names(v) for k, v in project["optional-dependencies"].items()}
    return _requirement_names(project["dependencies"]), extras


def _imports(paths: list[Path]) -> dict[str, set[str]]:
    """Top-level third-party modules -> the files that import them."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OWN:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


@functools.cache
def _installed() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions that provide it, read once: the map walks
    every installed distribution's file list (about 0.1 s on the CI machine), and was read again
    for each module looked up (32 of them)."""
    return md.packages_distributions()


def _distributions(module: str) -> set[str]:
    """The distributions that provide `module`; for one not installed here (the GPU extras on a
    CPU machine), the distribution of the same name."""
    found = _installed().get(module) or [module]
    return {d.lower().replace("_", "-") for d in found}


def _undeclared(paths: list[Path], allowed: set[str]) -> dict[str, set[str]]:
    missing = {}
    for module, files in _imports(paths).items():
        dists = _distributions(module)
        if not dists & allowed:
            missing[f"{module} ({', '.join(sorted(dists))})"] = files
    return missing


def test_the_package_declares_what_it_imports():
    deps, extras = _declared()
    optional = extras["gpu"] | extras["fp8"]  # imported only where a run asks for them, skipped without
    paths = [*(REPO / "llmbench_pytest").rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    assert _undeclared(paths, deps | optional) == {}


WHERE_INSTALLED = {"scikit-learn", "sklearn"}  # the distribution, or the module where it is absent
"""Imported by the tests only where it is installed, never needed: tests/conftest.py imports
scikit-learn before any test for the environment variables it sets on import (a GPU host's image
has it, and transformers imports it there)."""


PROBE_PREFIX = "_probe_"


def test_the_tests_and_tools_declare_what_they_import():
    deps, extras = _declared()
    # not the file test_the_check_sees_an_undeclared_import puts there for a moment: another worker
    # may run it meanwhile (a fresh clone's CI read it, and it was gone: FileNotFoundError)
    tests = [p for p in (REPO / "tests").glob("*.py") if not p.name.startswith(PROBE_PREFIX)]
    paths = [*tests, *(REPO / "tools").rglob("*.py")]
    allowed = deps | extras["test"] | extras["gpu"] | WHERE_INSTALLED  # tools/measure_overhead: liger
    assert _undeclared(paths, allowed) == {}


def test_the_check_sees_an_undeclared_import(tmp_path):
    sneaky = tmp_path / "x.py"
    sneaky.write_text("import numpy\nfrom yaml import safe_load\nimport json\n")
    sneaky = sneaky.rename(REPO / "tests" / f"{PROBE_PREFIX}{tmp_path.name}.py")
    try:
        missing = _undeclared([sneaky], {"torch"})
    finally:
        sneaky.unlink()
    assert {m.split()[0] for m in missing} == {"numpy", "yaml"}


def test_every_package_folder_is_installed():
    """pyproject.toml lists the packages setuptools installs: a folder left out (llmbench_pytest.plan
    was, 2026-11-28) works in an editable install and is missing from a wheel."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "llmbench_pytest").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), (
        f"add to pyproject.toml's [tool.setuptools] packages: {sorted(found - listed)}"
    )
