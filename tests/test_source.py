"""Source checks for mistakes that only a GPU run would show.

A function that says `import torch._dynamo` binds `torch` as a local name of the whole function;
a branch of it that reads `torch` without passing that import then fails with UnboundLocalError.
On CPU such a branch (`if device.type == "cuda"`) never runs, so no CPU test sees it: it ended
every configuration of the first GPU session after the teardown gained a Dynamo reset.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "llmbench_pytest"


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If):  # if TYPE_CHECKING: import torch
            names |= {a.split(".")[0] for n in node.body if isinstance(n, ast.Import) for a in _imported(n)}
    return names


def _imported(node: ast.Import) -> list[str]:
    return [a.asname or a.name for a in node.names]


def shadowed_by_dotted_imports(source: str) -> list[str]:
    """Functions that import `pkg.sub` (no `as`) where `pkg` is also a module-level import."""
    tree = ast.parse(source)
    module = _module_names(tree)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root = alias.name.split(".")[0]
                    if alias.asname is None and "." in alias.name and root in module:
                        found.append(f"{fn.name}: import {alias.name} (line {node.lineno})")
    return found


def test_the_check_finds_the_mistake_it_exists_for():
    bad = (
        "import torch\n"
        "def release(device, compiled):\n"
        "    if compiled:\n"
        "        import torch._dynamo\n"
        "        torch._dynamo.reset()\n"
        "    if device.type == 'cuda':\n"
        "        torch.cuda.synchronize(device)\n"
    )
    assert shadowed_by_dotted_imports(bad) == ["release: import torch._dynamo (line 4)"]
    good = bad.replace("import torch._dynamo\n", "from torch import _dynamo\n").replace(
        "torch._dynamo.reset", "_dynamo.reset"
    )
    assert shadowed_by_dotted_imports(good) == []


def test_no_function_shadows_a_module_level_import_with_a_dotted_one():
    found = {
        str(path.relative_to(PACKAGE)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if (hits := shadowed_by_dotted_imports(path.read_text()))
    }
    assert found == {}, "write `from pkg import sub` inside functions: " + repr(found)
