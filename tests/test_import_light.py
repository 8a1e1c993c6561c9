"""The module pytest loads at start-up must not import torch (seconds of start-up for every
pytest run in the environment, benchmarks or not)."""

import subprocess
import sys

import pytest


def test_plugin_entry_point_imports_no_heavy_modules():
    code = (
        "import sys, llmbench_pytest.plugin\n"
        "names = ('torch', 'transformers', 'deepspeed', 'matplotlib', 'numpy')\n"
        "heavy = [m for m in names if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"plugin start-up imported: {out.stdout.strip()}"


def test_plugin_is_registered_through_pytest11(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        ["*llmbench: distributed LLM training benchmarks*", "*--llmbench-strategies=NAMES*"]
    )


def test_finding_no_gpu_imports_no_torch():
    """Every session asks which device it runs on before it collects; on a machine without a GPU
    the answer must not cost an import of torch (1.5 s of each session's start-up on 2 cores)."""
    from llmbench_pytest.config import hardware

    if not hardware._no_gpu_device_nodes():
        pytest.skip("this machine has a GPU device node: torch or NVML decides")
    code = (
        "import sys\n"
        "from llmbench_pytest.config import hardware\n"
        "print(hardware.detect().device, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["cpu", "False"], out.stdout + out.stderr
