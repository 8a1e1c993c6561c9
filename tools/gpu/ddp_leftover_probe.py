"""What keeps DDP's gradient buckets on the GPU after the DDP module is gone (warm ranks).

    torchrun --nproc_per_node=1 tools/gpu/ddp_leftover_probe.py

Trains a llama-shaped model under DDP as the ddp strategy does (gradient_as_bucket_view, bf16
autocast, fused AdamW), drops everything, and prints the device memory still allocated after
each thing that might hand it back: garbage collection, waiting, a barrier, a collective, a
synchronize. The evidence behind worker/memory.release's handling of DDP's buckets.
"""

from __future__ import annotations

import gc
import time
import weakref

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import LlamaConfig, LlamaForCausalLM


def mib() -> str:
    torch.cuda.synchronize()
    return f"{torch.cuda.memory_allocated() / 2**20:9.1f} MiB"


def train(steps: int, as_view: bool) -> tuple[weakref.ref, weakref.ref]:
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16)  # fmt: skip
    model = LlamaForCausalLM(cfg).cuda()
    ddp = DistributedDataParallel(model, device_ids=[0], gradient_as_bucket_view=as_view)
    opt = torch.optim.AdamW(ddp.parameters(), fused=True)
    ids = torch.randint(0, 32000, (4, 512), device="cuda")
    for _ in range(steps):
        with torch.autocast("cuda", torch.bfloat16):
            loss = ddp(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return weakref.ref(ddp), weakref.ref(ddp.reducer)


def main() -> None:
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    print("fresh", mib(), flush=True)
    for as_view in (True, False):
        ddp, reducer = train(5, as_view)
        gc.collect()
        print(f"gradient_as_bucket_view={as_view}: after gc", mib(), "ddp alive", ddp() is not None,
              "reducer alive", reducer() is not None, flush=True)  # fmt: skip
        time.sleep(2)
        print("  after 2 s", mib(), flush=True)
        dist.barrier()
        print("  after a barrier", mib(), flush=True)
        t = torch.ones(1, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        print("  after an all_reduce and a synchronize", mib(), flush=True)
        torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
