"""The encoder-decoder benchmark's Transformer, trained in epochs from memory and from disk.

The model's shapes are that benchmark's flags (--llmbench-model-config d_model=...,nhead=...,
num_encoder_layers=...,num_decoder_layers=...,dim_feedforward=...); the presets are its examples
(encdec-3m on CPU, encdec-50m on GPU, encdec-200m). Each configuration runs twice: with the
samples in memory, and read from numbered binary shards on disk (--llmbench-data-dir picks the
storage to test; the page cache is dropped before each epoch). The result's epoch block splits
each epoch's wall time into compute and waiting for data, so storage speed shows.
"""

import pytest


@pytest.mark.llmbench(workload="seq2seq", strategies="ddp,fsdp,zero2", data="memory,disk")
def test_encoder_decoder(llmbench):
    result = llmbench.train()
    # memory under the limit, step time steady, loss falling, sharding order at world size 2+
    llmbench.validate(result)
