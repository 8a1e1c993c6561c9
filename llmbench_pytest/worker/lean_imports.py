"""Runs inside each rank (and the trace-ahead process): keeps transformers from importing what no
benchmark uses.

transformers' text generation (imported by every model class, through its auto factory) asks
whether scikit-learn is installed, for assisted generation's ROC curve; where it is, the 5.17
release imports it with the module, and scikit-learn brings pandas and scipy.stats: 1.5 s of the
4.9 s a rank spent importing before its first llama model on the 1x H100 image (py-spy,
docs/results/2026-11-26-h100-pretrain-fresh-host-4). Nothing here generates text, so the question
is answered "no" in these processes before that module is imported; later transformers releases
import scikit-learn only when assisted generation runs, and are unaffected.
"""

from __future__ import annotations

import sys

GENERATION_MODULE = "transformers.generation.candidate_generator"


def _no() -> bool:
    return False


def skip_unused_imports() -> bool:
    """Tell transformers that scikit-learn is absent, in this process, unless its generation
    module is imported already (then it is too late to save anything, and it is left alone).
    Returns whether the answer was changed. Without transformers, nothing to do."""
    if GENERATION_MODULE in sys.modules:
        return False
    try:
        from transformers import utils
        from transformers.utils import import_utils
    except ImportError:
        return False
    changed = False
    for module in (import_utils, utils):
        if hasattr(module, "is_sklearn_available"):
            module.is_sklearn_available = _no
            changed = True
    return changed
