"""LoRA fine-tuning (after the LoRA fine-tuning guide): peft adapters on a frozen
Llama/Mistral-architecture model.

A 7B Mistral config on a GPU, a tiny one on CPU. Options that matter here: --llmbench-lora-rank,
--llmbench-optimizer (adamw_torch, paged_adamw_8bit), --llmbench-grad-ckpt, --llmbench-dtype,
--llmbench-price (cost per 1K samples). With --llmbench-diagnostic each configuration runs as
the guide's six-variant diagnostic matrix.
"""

import pytest


@pytest.mark.llmbench(workload="lora", strategies="ddp,fsdp,zero2,zero3")
def test_finetune_lora(llmbench):
    result = llmbench.train()
    # memory under the limit, step time steady, loss falling (only the adapters learn), and the
    # sharding order where several strategies ran at one world size
    llmbench.validate(result)
