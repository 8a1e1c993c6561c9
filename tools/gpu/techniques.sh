#!/usr/bin/env bash
# What each technique adds to llama-1b on one H100 (seq 2048, batch 16, fsdp_grad_op,
# world size 1), and the fastest configuration's MFU. After `source tools/gpu/setup.sh`:
#   tools/gpu/techniques.sh NAME [PART...]     # results in /tmp/llmbench/NAME, packed as $OUT/NAME.tgz
# PARTs (default: all four, in this order; split them over device calls to stay under a call's limit):
#   eager      eager, chunked loss                                  (torch.compile's share, against compiled)
#   compiled   compiled: loss none|chunked|liger x fp8 none|tensorwise, liger without fp8 left out
#   attention  compiled, chunked loss, fp8, SDPA flash              (against compiled's default: cuDNN here)
#   report     `llmbench report` over all of them, and the "What each technique buys" section printed
# They write into one results folder, so the report pairs each technique with the same
# configuration without it.
set -uo pipefail
name=${1:?usage: tools/gpu/techniques.sh NAME [eager|compiled|attention|report ...]}
shift
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(eager compiled attention report)
common=(--llmbench-model=llama-1b --llmbench-world-sizes=1 --llmbench-strategies=fsdp_grad_op
  --llmbench-batch=16 --llmbench-seq-lens=2048 --llmbench-steps=10 --llmbench-warmup=3)
here=$(dirname "$0")
for part in "${parts[@]}"; do
  case $part in
    eager)
      RUN_TIMEOUT=120 "$here/run.sh" "$name" "${common[@]}" -k test_pretrain --llmbench-fused-loss=chunked ;;
    compiled)
      RUN_TIMEOUT=330 "$here/run.sh" "$name" "${common[@]}" --llmbench-compile \
        --llmbench-fused-loss=none,chunked,liger --llmbench-fp8=none,tensorwise \
        -k "test_pretrain and not (loss_liger and fp8_none)" ;;
    attention)
      RUN_TIMEOUT=120 "$here/run.sh" "$name" "${common[@]}" -k test_pretrain --llmbench-compile \
        --llmbench-fused-loss=chunked --llmbench-fp8=tensorwise --llmbench-attention=flash ;;
    report)
      llmbench report "/tmp/llmbench/$name" --no-plots -q
      sed -n '/## What each technique buys/,/^## Memory/p' "/tmp/llmbench/$name/summary/BENCHMARK_REPORT.md"
      tar czf "$OUT/$name.tgz" -C /tmp/llmbench "$name" ;;
    *) echo "unknown part $part: eager, compiled, attention or report" >&2; exit 2 ;;
  esac
done
