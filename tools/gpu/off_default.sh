#!/usr/bin/env bash
# Off the defaults: models of 3B parameters and more, two batch and sequence variants each, at world
# sizes 1, 2 and 4 side by side, ddp/fsdp/zero2/zero3 at the suite's settings, and the ZeRO-3 runs
# of 2026-11-28 again at the settings they ran with then (hf_auto). Short windows: memory and the
# checks are the point, not speed. Then, per run, the peak measured against the one predicted,
# `llmbench plan`'s fit verdict against what happened (tools/fit_table.py) and every failed check.
# After `source tools/gpu/setup.sh` on a 4-GPU host:
#   tools/gpu/off_default.sh NAME
# Results in /tmp/llmbench/NAME, packed as $OUT/NAME.tgz; the table in $OUT/NAME-table.md (and
# .json), printed last. Every configuration runs, those predicted not to fit too
# (--llmbench-run-unfit): an out-of-memory run is a result, and the verdict's evidence.
#   OFF_DEFAULT_DEADLINE=S   stop starting sessions S seconds after the start, and end the one
#                            running then (default 450; what finished is tabled)
#   OFF_DEFAULT_SESSIONS=a,b the sessions, in order (default: llama-7b,hf_auto,llama-3b,mistral-7b;
#                            the others: llama-3b-512, llama-350m, gpt2-medium, mistral-b1)
#   OFF_DEFAULT_CPU=1        the same path on a CPU with the tiny presets, world sizes 1 and 2 (smoke)
set -uo pipefail
name=${1:?usage: tools/gpu/off_default.sh NAME}
out=${OUT:-/tmp/llmbench-out}
dir=/tmp/llmbench/$name
mkdir -p "$dir" "$out"
start=$(date +%s)
deadline=$((start + ${OFF_DEFAULT_DEADLINE:-450}))
strategies=ddp,fsdp,zero2,zero3
# one warm-up step (ZeRO-3's trace is complete from the second), then an adaptive window of at least
# 4 steps that stops at 4 s once the mean is known to the mean_interval check's 10%
window=(--llmbench-warmup=1 --llmbench-min-steps=4 --llmbench-window-budget=4 --llmbench-run-unfit)
if [ "${OFF_DEFAULT_CPU:-0}" = 1 ]; then
  # model:batch:seq lengths:world sizes:strategies (default: all four):model config
  declare -A plan=(
    [llama-7b]="llama-tiny:2:64,128:1,2:"
    [llama-3b]="gpt2-tiny:4:64,128:1,2:"
    [mistral-7b]="mistral-tiny:2:64,128:1,2:"
    [hf_auto]="llama-tiny:2:128:2:zero3"
    [llama-3b-512]="llama-tiny:8:64:1,2:"
    [llama-350m]="llama-tiny:16:256:1,2:"
    [gpt2-medium]="gpt2-tiny:16:128:1,2::n_layer=6"
    [mistral-b1]="mistral-tiny:1:256:2:"
  )
  device=(--llmbench-device=cpu)
else
  declare -A plan=(
    # the issue's 7B: ddp at 137 GB on a 150 GB GPU, zero3 at 4 GPUs; 4096 tokens runs ddp and zero2
    # out of memory at one GPU
    [llama-7b]="llama-7b:1:2048,4096:1,2,4:"
    # batch 8: from model states (512 tokens) to activations (2048; ddp out of memory)
    [llama-3b]="llama-3b:8:512,2048:1,2,4:"
    # grouped-query attention, the preset's batch of 4
    [mistral-7b]="mistral-7b:4:1024,2048:1,2,4:"
    # the issue's ZeRO-3 runs at the settings they had (buckets hidden^2): +13.7% and +13.5% before
    [hf_auto]="llama-3b:2:2048:2,4:zero3"
    # the run that failed loss_falls at the GPT-3 rate without a warm-up (zero3, 2 GPUs)
    [llama-3b-512]="llama-3b:8:512:1,2,4:"
    # batch 16 at 4096 tokens: activations, not model states, decide what fits
    [llama-350m]="llama-350m:16:4096:1,2,4:"
    # gpt2's 355M shapes (GPT-2 medium: 24 layers of 1024), batch 16 at its whole 1024 positions
    [gpt2-medium]="gpt2:16:1024:1,2,4::n_embd=1024,n_layer=24,n_head=16"
    # grouped-query attention at batch 1 and 4096 tokens
    [mistral-b1]="mistral-7b:1:4096:2,4:"
  )
  device=()
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$dir/gpus.csv"
fi
sessions=${OFF_DEFAULT_SESSIONS:-llama-7b,hf_auto,llama-3b,mistral-7b}
hf_auto=(--llmbench-zero-bucket=hf_auto --llmbench-zero3-prefetch=hf_auto --llmbench-zero3-persistence=hf_auto)
for session in ${sessions//,/ }; do
  IFS=: read -r model batch seqs sizes only config <<<"${plan[$session]:?unknown session $session: ${!plan[*]}}"
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt 45 ]; then
    echo "== $session: not started, $left s left before the deadline"
    continue
  fi
  extra=()
  [ "$session" = hf_auto ] && extra=("${hf_auto[@]}")
  [ -n "$config" ] && extra+=(--llmbench-model-config="$config")
  select=(--llmbench-strategies="${only:-$strategies}")
  echo "== $session: $model batch $batch seq $seqs at world sizes $sizes ($left s left)"
  timeout --foreground --kill-after=30 "$left" python3 -m pytest benchmarks/test_pretrain.py -p no:cacheprovider -q -rf \
    --llmbench-model="$model" --llmbench-batch="$batch" --llmbench-seq-lens="$seqs" \
    --llmbench-world-sizes="$sizes" "${select[@]}" "${window[@]}" "${device[@]}" "${extra[@]}" \
    --llmbench-results-dir="$dir/$session" 2>&1 | tail -25
done
mib=$(awk -F', ' 'NR==1 {print $3+0}' "$dir/gpus.csv" 2>/dev/null)
python3 tools/fit_table.py "$dir" --out "$out/$name-table.md" --json "$out/$name-table.json" \
  ${mib:+--nvml-total-mib "$mib"}
tar czf "$out/$name.tgz" --exclude='.llmbench-data' -C /tmp/llmbench "$name"
cat "$out/$name-table.md"
echo "wall $(( $(date +%s) - start )) s"
