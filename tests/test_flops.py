"""FLOPs per token follows PaLM appendix B, with N counting matmul parameters only."""

import pytest
import torch

from llmbench_pytest.analysis.flops import FlopsModel, mfu, tflops_per_gpu
from llmbench_pytest.worker.models import matmul_params


def test_palm_formula_by_hand():
    f = FlopsModel(n_params=0, matmul_params=1_000_000, layers=2, heads=4, head_dim=16, seq_len=128)
    assert f.per_token == 6 * 1_000_000 + 12 * 2 * 4 * 16 * 128


def test_embedding_lookups_are_not_matmuls_but_a_tied_head_is():
    emb = torch.nn.Embedding(100, 8)
    untied = torch.nn.ModuleDict({"emb": emb, "proj": torch.nn.Linear(8, 8, bias=False)})
    assert matmul_params(untied) == 64

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(100, 8)
            self.head = torch.nn.Linear(8, 100, bias=False)
            self.head.weight = self.emb.weight

        def get_output_embeddings(self):
            return self.head

    assert matmul_params(Tied()) == 800


def test_mfu_of_a_known_rate():
    # 1e12 FLOPs/token at 1000 tokens/s over 2 GPUs is 500 TFLOP/s each; half of a 1000 peak
    per_gpu = tflops_per_gpu(1e12, 1000, 2)
    assert per_gpu == pytest.approx(500)
    assert mfu(per_gpu, 1000) == pytest.approx(0.5)
