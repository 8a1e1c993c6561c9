"""The LoRA fine-tuning guide's diagnostic matrix: which knob is the bottleneck of a LoRA fine-tuning run?

Six configurations around a baseline: the other optimizer, half the LoRA rank, half the
sequence length, half the sequence with twice the batch, and the other 16-bit precision. The
report (`llmbench report`) shows each one's speed-up over the baseline and what worked.
"""

import pytest


@pytest.mark.llmbench(workload="lora", strategies="ddp", diagnostic=True)
def test_lora_diagnostic(llmbench):
    result = llmbench.train()
    llmbench.validate(result, ["memory", "loss_falls"])
