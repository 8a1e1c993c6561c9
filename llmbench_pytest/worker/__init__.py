"""Code that runs inside each training rank.

Everything under this package may import torch, transformers and (in its strategy module only)
deepspeed. It receives a RunSpec and an initialised process group and returns measurements; it
knows nothing about pytest.
"""
