"""What a fresh rank's first CUDA work costs, and whether it can overlap the imports before it.

    python3 tools/gpu/first_cuda.py --mode serial     # imports, then CUDA, then a llama step
    python3 tools/gpu/first_cuda.py --mode overlap    # CUDA started in a thread while importing
    python3 tools/gpu/first_cuda.py --json out.json   # also write the figures

Each mode runs in a new interpreter (this script starts one per mode and round): `import torch`,
then the rank's other imports (transformers' llama, DeepSpeed), the CUDA context, a first bf16
matmul (cuBLAS), and one forward and backward of a small llama at seq 2048 (its first kernels:
attention, norms, the loss). In `overlap` the CUDA part runs in a thread started right after
`import torch`, while the main thread imports; the question is whether the wall time to the end
of the first llama step falls, which needs the CUDA calls to release the GIL while they wait.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _child import figures_of

CHILD = r"""
import json, sys, threading, time
t0 = time.perf_counter()
marks = {}
def mark(name):
    marks[name] = round(time.perf_counter() - t0, 3)
import torch
mark("import_torch")
def cuda_part():
    torch.cuda.init()
    mark("cuda_init")
    x = torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    mark("context")
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    mark("first_matmul")
mode = sys.argv[1]
worker = None
if mode == "overlap":
    worker = threading.Thread(target=cuda_part)
    worker.start()
import transformers.models.llama.modeling_llama  # noqa: F401
mark("import_transformers")
import deepspeed  # noqa: F401
mark("import_deepspeed")
if worker is None:
    cuda_part()
else:
    worker.join()
    mark("cuda_joined")
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                  num_attention_heads=16, num_key_value_heads=8)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
mark("model_built")
ids = torch.randint(0, 32000, (2, 2048), device="cuda")
for i in range(2):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.cuda.synchronize()
    mark(f"llama_step{i + 1}")
print(json.dumps({"mode": mode, "marks": marks}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["serial", "overlap", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    modes = ["serial", "overlap"] if args.mode == "both" else [args.mode]
    runs = []
    for _ in range(args.rounds):
        for mode in modes:
            started = time.perf_counter()
            run = figures_of([sys.executable, "-c", CHILD, mode], mode)
            wall = time.perf_counter() - started
            if run is None:
                continue
            run["wall_sec"] = round(wall, 3)
            runs.append(run)
            print(json.dumps(run))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(runs, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
