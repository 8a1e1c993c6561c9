"""Runs inside each rank: the software and hardware a result was measured on."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..config import host_share
from ..config.nvml import nvml_session, text
from ..config.ranks import rank_env


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def nvidia_driver() -> str | None:
    try:
        with nvml_session() as nvml:
            return text(nvml.nvmlSystemGetDriverVersion())
    except Exception:  # NvmlUnavailable, or a driver that does not answer
        pass
    try:  # the kernel module reports its version here even without nvidia-ml-py
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        return next((w for w in first.split() if w[:1].isdigit() and "." in w), None)
    except (OSError, IndexError):
        return None


@functools.cache
def git_info(where: str) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", where, *args], capture_output=True, text=True, timeout=5, check=True
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


@functools.cache
def _static(device_type: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "device": device_type,
        "gpu_name": None,
        "gpu_count": 0,
        "gpu_memory_gb": None,
        "driver": None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": None,
        "deepspeed": package_version("deepspeed"),
        "transformers": package_version("transformers"),
        "pytest_benchmark": package_version("pytest-benchmark"),
        "llmbench": __version__,
    }
    if device_type == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(
            gpu_name=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gb=props.total_memory / 1e9,
            driver=nvidia_driver(),
            nccl=".".join(str(v) for v in torch.cuda.nccl.version()),
        )
    return info


def collect(device: torch.device, repo_dir: str | None = None) -> dict[str, Any]:
    info = dict(_static(device.type))
    info["cpu_threads_per_rank"] = torch.get_num_threads()
    # the host's share this rank ran with: its cores, threads and how they were chosen
    info["host_share"] = host_share.describe(
        torch.get_num_threads(), host_share.usable_cores(), rank_env().local_world_size, device.type
    )
    info.update(git_info(repo_dir or os.getcwd()))
    return info
