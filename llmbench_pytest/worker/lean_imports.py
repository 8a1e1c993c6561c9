"""Runs inside each rank (and the trace-ahead process): keeps transformers from importing what no
benchmark uses.

transformers imports some optional packages with its modules wherever they are installed, for
features no benchmark uses. Each is asked through an availability check, so the answer is "no" in
these processes before the module that asks is imported:
- scikit-learn, for assisted generation's ROC curve: the 5.17 release imports it with its generation
  module (which every model class imports, through its auto factory), and it brings pandas and
  scipy.stats: 1.5 s of the 4.9 s a rank spent importing before its first llama model on the 1x
  H100 image (py-spy, docs/results/2026-11-26-h100-pretrain-fresh-host-4). Later releases import
  it only when assisted generation runs.
- scipy, for the object-detection losses' matching (scipy.optimize), which modeling_utils imports
  through its loss table: 0.5 s of that rank's imports. The rank's own statistics import
  scipy.special when the window needs them (analysis/stats.py), which the answer does not touch.
- torchao, for loading checkpoints quantized with it: its quantizer imports torchao's prototype
  safetensors support with modeling_utils, 0.33 s. `--llmbench-fp8` imports torchao itself
  (worker/techniques.py), not through transformers.
"""

from __future__ import annotations

import sys

UNUSED = (
    ("is_sklearn_available", "transformers.generation.candidate_generator"),
    ("is_scipy_available", "transformers.loss.loss_for_object_detection"),
    ("is_torchao_available", "transformers.quantizers.quantizer_torchao"),
)
"""Each availability check answered "no", and the module that imports the package when it says
yes: once that module is imported it is too late to save anything, and the check is left alone."""


def _no() -> bool:
    return False


def skip_unused_imports() -> bool:
    """Answer "no" to each check in UNUSED whose importing module is not imported yet, in this
    process. Returns whether any answer was changed. Without transformers, nothing to do."""
    pending = [check for check, importer in UNUSED if importer not in sys.modules]
    if not pending:
        return False
    try:
        from transformers import utils
        from transformers.utils import import_utils
    except ImportError:
        return False
    changed = False
    for module in (import_utils, utils):
        for check in pending:
            if hasattr(module, check):
                setattr(module, check, _no)
                changed = True
    return changed
