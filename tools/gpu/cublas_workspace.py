"""What cuBLAS's workspaces add to a training step's allocated GPU memory, against what the peak
prediction counts (analysis/peak_model.cublas_workspace_bytes). A matrix product in the forward
(this thread), its backward (autograd's device thread), and a bf16 linear with a bias (cuBLASLt),
each measured as the allocated memory it leaves beyond its own tensors.

    python3 tools/gpu/cublas_workspace.py
"""

from __future__ import annotations

import os
import sys

import torch

from llmbench_pytest.analysis.peak_model import cublas_workspace_bytes

MIB = 2**20


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (none visible)")
        return 2
    dev = torch.device("cuda", 0)

    def allocated() -> int:
        torch.cuda.synchronize(dev)
        return torch.cuda.memory_allocated(dev)

    a = torch.randn(512, 512, device=dev, requires_grad=True)
    b = torch.randn(512, 512, device=dev)
    start = allocated()
    c = a @ b
    forward = allocated() - start - c.nbytes
    c.sum().backward()
    backward = allocated() - start - forward - c.nbytes - a.grad.nbytes
    x = torch.randn(64, 512, device=dev, dtype=torch.bfloat16)
    w = torch.randn(256, 512, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(256, device=dev, dtype=torch.bfloat16)
    before_lt = allocated()
    y = torch.nn.functional.linear(x, w, bias)
    lt = allocated() - before_lt - y.nbytes
    major = torch.cuda.get_device_capability(dev)[0]
    predicted = cublas_workspace_bytes("cuda", major, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    print(f"{torch.cuda.get_device_name(dev)} (capability {major}), torch {torch.__version__}, "
          f"CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG', 'unset')}")  # fmt: skip
    print(f"forward's thread: +{forward / MIB:.2f} MiB; autograd's thread: +{backward / MIB:.2f} MiB; "
          f"bf16 linear with bias (cuBLASLt) after them: +{lt / MIB:.2f} MiB")  # fmt: skip
    measured = forward + backward + lt
    print(f"measured {measured / MIB:.2f} MiB, predicted {predicted / MIB:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
