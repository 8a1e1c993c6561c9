"""llmbench: a pytest plugin and benchmark suite for distributed LLM training.

The pytest entry point is ``llmbench_pytest.plugin``; code that runs inside each training rank
lives in ``llmbench_pytest.worker``.
"""

__version__ = "0.1.0"
