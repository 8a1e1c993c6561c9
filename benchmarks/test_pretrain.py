"""Pre-training throughput and memory of every strategy, on a causal LM from the presets.

Parametrised by the llmbench plugin over --llmbench-strategies, --llmbench-seq-lens and the world
sizes (test ids read `zero2-ws2-seq128-llama-tiny`). Without torchrun every configuration runs at
each of --llmbench-world-sizes, by default `auto`: 1, 2, 4, ... up to the GPUs present, 1 and 2 on
a CPU (with 2 cores or more). Under torchrun (`torchrun --nproc_per_node=N -m pytest ...`) the world
size is torchrun's.
"""


def test_pretrain(llmbench):
    result = llmbench.train()
    # the validation checks: peak memory under the limit, step-time CV under the bound,
    # loss falling over the measured steps, and memory per rank following the sharding
    llmbench.validate(result)
