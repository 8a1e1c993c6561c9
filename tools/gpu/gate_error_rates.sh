#!/usr/bin/env bash
# The speed decision's false alarms (A/A) and power (A/B: ddp slowed by 10% through
# LLMBENCH_INJECT_FAULT) on this GPU host, in about 5 minutes, with tools/gate_error_rates.py.
# After `source tools/gpu/setup.sh`:
#   tools/gpu/gate_error_rates.sh          # sessions and analysis under $OUT/gate-error-rates
# Every GPU (at most 2) runs one pytest session after another: identical sessions for A_S seconds,
# then sessions with ddp slowed by 10% of its median A step time on that GPU for B_S seconds.
# The sessions are then interleaved by GPU (a-01 GPU 0, a-02 GPU 1, ...): the A/A gate runs pair
# two GPUs of the host (one GPU: two sessions of it), each A/B run one GPU's A and B sessions.
# MODEL, SEQ, STEPS, STRATEGIES, A_S and B_S change the shapes (defaults: llama-125m, 1024, 30,
# ddp,fsdp, 150 and 110 s). SLOW names what the B sessions slow (default ddp:10%; several:
# SLOW=ddp:10%,zero3:25%). WINDOWS=default runs the suite's own llama-1b sessions instead: its model,
# shape and adaptive windows (the sessions the decision's prior was measured on), MODEL still applies.
set -uo pipefail
root=${OUT:?set OUT}/gate-error-rates
gpus=$(nvidia-smi -L | wc -l)
[ "$gpus" -gt 2 ] && gpus=2
args=(
  benchmarks/test_pretrain.py --llmbench-device=cuda --llmbench-world-sizes=1 --llmbench-launch=inprocess
  --llmbench-model="${MODEL:-llama-125m}" --llmbench-seq-lens="${SEQ:-1024}" --llmbench-steps="${STEPS:-30}"
  --llmbench-warmup=5
)
if [ "${WINDOWS:-}" = default ]; then
  args=(benchmarks/test_pretrain.py --llmbench-device=cuda --llmbench-world-sizes=1 ${MODEL:+--llmbench-model=$MODEL})
fi
slowed=$(echo "${SLOW:-ddp:10%}" | sed 's/:[^,]*//g')
phase() {  # phase LABEL SECONDS [collect options]: every GPU collects sessions until SECONDS pass
  local label=$1 secs=$2
  shift 2
  for g in $(seq 0 $((gpus - 1))); do
    (
      end=$((SECONDS + secs))
      while [ $SECONDS -lt $end ]; do
        CUDA_VISIBLE_DEVICES=$g python3 tools/gate_error_rates.py collect "$root/gpu$g" --label "$label" \
          --sessions 1 --strategies "${STRATEGIES:-ddp,fsdp}" "$@" -- "${args[@]}"
      done
    ) &
  done
  wait
}
date -u +"start %Y-%m-%dT%H:%M:%SZ"
phase a "${A_S:-150}"
for g in $(seq 0 $((gpus - 1))); do  # each GPU slowed by 10% of its own A sessions' median
  (
    end=$((SECONDS + ${B_S:-110}))
    while [ $SECONDS -lt $end ]; do
      CUDA_VISIBLE_DEVICES=$g python3 tools/gate_error_rates.py collect "$root/gpu$g" --label b --sessions 1 \
        --strategies "$slowed" --slow "${SLOW:-ddp:10%}" --reference "$root/gpu$g" -- "${args[@]}"
    done
  ) &
done
wait
date -u +"end %Y-%m-%dT%H:%M:%SZ"
# interleave the GPUs' sessions into one folder, a-NN and b-NN, for the analysis
mkdir -p "$root/all"
for label in a b; do
  n=0
  for i in $(seq -w 1 99); do
    for g in $(seq 0 $((gpus - 1))); do
      s="$root/gpu$g/$label-$i"
      [ -d "$s" ] || continue
      n=$((n + 1))
      ln -sfn "$s" "$root/all/$label-$(printf %02d $n)"
    done
  done
done
python3 tools/gate_error_rates.py analyse "$root/all" --slowed "$slowed" | tee "$root/analysis.txt"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$root/gpus.txt"
