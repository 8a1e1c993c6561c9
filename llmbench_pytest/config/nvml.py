"""The one door to NVML (nvidia-ml-py): opened here for the hardware survey at collection, the
driver version in each result, and the GPU monitor of the measured window.

Standard library only until used: pynvml is imported on first open, so a machine without it (or
without a GPU) gets NvmlUnavailable with the reason and an install hint, never an ImportError.
NVML answers without creating a CUDA context, which is why the pytest process asks it and not
torch: it holds no GPU memory while its ranks measure theirs.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


class NvmlUnavailable(RuntimeError):
    """nvidia-ml-py is missing or NVML cannot start (no driver, no GPU)."""


def open_nvml() -> Any:
    """The pynvml module, initialised; pair with close_nvml. Raises NvmlUnavailable."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"ImportError: {exc}; pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        raise NvmlUnavailable(f"{type(exc).__name__}: {exc}") from None
    return pynvml


def close_nvml(nvml: Any) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """`with nvml_session() as nvml:` for a few queries; raises NvmlUnavailable."""
    nvml = open_nvml()
    try:
        yield nvml
    finally:
        close_nvml(nvml)


def text(value: Any) -> str:
    """NVML returns bytes in older bindings and str in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)
