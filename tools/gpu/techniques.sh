#!/usr/bin/env bash
# Issue 17 on one H100: what each technique adds to llama-1b (seq 2048, batch 16, fsdp_grad_op,
# world size 1), and the fastest configuration's MFU. After `source tools/gpu/setup.sh`:
#   tools/gpu/techniques.sh [NAME]          # about 7-8 minutes; results in /tmp/llmbench/NAME
# Three sessions write into one results folder, so the report pairs each technique with the same
# configuration without it:
#   1. eager, chunked loss                                     (torch.compile's share, against 2)
#   2. compiled: loss none|chunked|liger x fp8 none|tensorwise (liger without fp8 left out)
#   3. compiled, chunked loss, fp8, SDPA flash                 (against 2's default: cuDNN here)
# Then `llmbench report` writes summary/ and everything is packed as $OUT/NAME.tgz.
set -uo pipefail
name=${1:-h100-llama-1b-mfu}
common=(--llmbench-model=llama-1b --llmbench-world-sizes=1 --llmbench-strategies=fsdp_grad_op
  --llmbench-batch=16 --llmbench-seq-lens=2048 --llmbench-steps=10 --llmbench-warmup=3)
here=$(dirname "$0")
RUN_TIMEOUT=120 "$here/run.sh" "$name" "${common[@]}" -k test_pretrain --llmbench-fused-loss=chunked
RUN_TIMEOUT=330 "$here/run.sh" "$name" "${common[@]}" --llmbench-compile \
  --llmbench-fused-loss=none,chunked,liger --llmbench-fp8=none,tensorwise \
  -k "test_pretrain and not (loss_liger and fp8_none)"
RUN_TIMEOUT=120 "$here/run.sh" "$name" "${common[@]}" -k test_pretrain --llmbench-compile \
  --llmbench-fused-loss=chunked --llmbench-fp8=tensorwise --llmbench-attention=flash
llmbench report "/tmp/llmbench/$name" --no-plots -q
sed -n '/## What each technique buys/,/^## Memory/p' "/tmp/llmbench/$name/summary/BENCHMARK_REPORT.md" | head -30
tar czf "$OUT/$name.tgz" -C /tmp/llmbench "$name"
