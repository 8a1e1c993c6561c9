"""Pre-training throughput and memory of every strategy, on a causal LM from the presets.

Parametrised by the llmbench plugin over --llmbench-strategies and --llmbench-seq-lens (test ids
read `zero2-ws2-seq128-llama-tiny`), at the world size torchrun gave (1 without torchrun).
"""


def test_pretrain(llmbench):
    result = llmbench.train()
    # the seeds' validation checks: peak memory under the limit, step-time CV under the bound,
    # loss falling over the measured steps, and memory per rank following the sharding
    llmbench.validate(result)
