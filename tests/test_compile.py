"""--llmbench-compile compiles each transformer block: Dynamo must really trace them.

torch.compile skips frames whose code lives in torch.nn, silently: a block class whose forward
is torch's own (nn.TransformerEncoderLayer) "compiles" to nothing and runs eagerly while the
result says compile=true. The eager backend traces without building kernels, so this runs in
seconds on CPU.
"""

import pytest
import torch
from torch._dynamo.utils import counters

from llmbench_pytest.config.presets import resolve_model
from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.worker.models import build_model

CASES = {"causal_lm": "llama-tiny", "lora": "mistral-tiny", "seq2seq": "encdec-3m"}


@pytest.mark.parametrize("workload", sorted(CASES))
def test_every_workload_has_blocks_that_dynamo_traces(workload):
    model = CASES[workload]
    spec = RunSpec(
        strategy="ddp",
        model=model,
        seq_len=16,
        per_device_batch=2,
        steps=1,
        warmup=0,
        dtype="fp32",
        workload=workload,
    )
    built = build_model(spec, resolve_model(model), torch.device("cpu"))
    length = 16 * (2 if workload == "seq2seq" else 1)
    batch = torch.randint(0, built.vocab_size - 1, (2, length))
    for cls in built.block_classes:  # each class on its own: one compiling cannot hide another
        blocks = [m for m in built.module.modules() if type(m) is cls]
        assert blocks, f"{workload}: no {cls.__name__} in the model"
        torch._dynamo.reset()
        counters.clear()
        for block in blocks:
            block.compile(backend="eager")
        built.loss(built.module, batch).backward()
        # one graph per block shape at least; zero means every block ran eagerly
        assert counters["stats"]["unique_graphs"] >= 1, f"{workload}: torch.compile traced no {cls.__name__}"
        for block in blocks:
            block._compiled_call_impl = None  # back to eager for the next class
    torch._dynamo.reset()
