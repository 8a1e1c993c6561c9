#!/usr/bin/env bash
# Each strategy at the settings a well-informed user runs (config/strategy_settings.py), against the
# Hugging Face rule the suite used before, and a straggler named. After `source tools/gpu/setup.sh`:
#   tools/gpu/strategy_settings.sh NAME [PART...]    # results in /tmp/llmbench/NAME, packed as $OUT/NAME.tgz
# PARTs (default: all three, in this order; about 5 min on 4x H200 with a fresh host's start):
#   small   llama-1b at 2 GPUs: fsdp, and zero3 with its buckets and prefetch each at the default and
#           at the Hugging Face rule (the four combinations: the last is the suite's old config)
#   large   llama-7b at 4 GPUs: fsdp and zero3 (profiled: where the time goes), then fsdp_grad_op
#           with rank 2 slowed 0.3 s before every optimizer step (LLMBENCH_INJECT_FAULT)
#   report  `llmbench report` over both: Strategy settings, Stragglers, Where the time goes
#   versus  ZeRO-3 against FSDP at the suite's defaults, llama-1b at 2 GPUs, in ROUNDS sessions (default
#           3), each its own pytest session: the session is the unit the spread between them needs
# SMALL_MODEL, LARGE_MODEL, SMALL_WS, LARGE_WS and SLOW_RANK change the shapes (the CPU proof:
# llama-tiny at 2 ranks, rank 1); EXTRA adds pytest arguments to both sessions.
set -uo pipefail
name=${1:?usage: tools/gpu/strategy_settings.sh NAME [small|large|report ...]}
shift
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(small large report)
here=$(dirname "$0")
budget=(--llmbench-window-budget=10 -k test_pretrain)
# shellcheck disable=SC2206  # EXTRA is a list of words on purpose
extra=(${EXTRA:-})
for part in "${parts[@]}"; do
  case $part in
    small)
      RUN_TIMEOUT=130 "$here/run.sh" "$name" --llmbench-model="${SMALL_MODEL:-llama-1b}" \
        --llmbench-world-sizes="${SMALL_WS:-2}" --llmbench-strategies=fsdp,zero3 \
        --llmbench-zero-bucket=default,hf_auto --llmbench-zero3-prefetch=default,hf_auto \
        "${budget[@]}" "${extra[@]}" ;;
    large)
      LLMBENCH_INJECT_FAULT="fsdp_grad_op:slow=0.3:${SLOW_RANK:-2}" RUN_TIMEOUT=160 "$here/run.sh" "$name" \
        --llmbench-model="${LARGE_MODEL:-llama-7b}" --llmbench-world-sizes="${LARGE_WS:-4}" \
        --llmbench-strategies=fsdp,zero3,fsdp_grad_op "${budget[@]}" "${extra[@]}" ;;
    versus)
      for round in $(seq 1 "${ROUNDS:-3}"); do
        RUN_PACK=0 RUN_TIMEOUT=120 "$here/run.sh" "$name/round-$round" --llmbench-model="${SMALL_MODEL:-llama-1b}" \
          --llmbench-world-sizes="${SMALL_WS:-2}" --llmbench-strategies=fsdp,zero3 "${budget[@]}" "${extra[@]}"
      done
      python3 - /tmp/llmbench/"$name" <<'PY'
import glob, json, statistics, sys
rounds = {}
for f in sorted(glob.glob(sys.argv[1] + "/round-*/[0-9]*-*/*_results/result.json")):
    d = json.load(open(f))
    rounds.setdefault(f.split("/round-")[1].split("/")[0], {})[d["strategy"]] = d["tokens_per_sec"] or 0
ratios = [r["zero3"] / r["fsdp"] - 1 for r in rounds.values() if r.get("fsdp") and r.get("zero3")]
for k, r in sorted(rounds.items()):
    print(f"round {k}: fsdp {r.get('fsdp', 0):,.0f} zero3 {r.get('zero3', 0):,.0f} tokens/s")
if ratios:
    print(f"zero3 against fsdp: {', '.join(f'{x:+.1%}' for x in ratios)}; mean {statistics.mean(ratios):+.1%}")
PY
      tar czf "$OUT/$name.tgz" -C /tmp/llmbench "$name" ;;
    report)
      llmbench report "/tmp/llmbench/$name" --no-plots -q
      md=/tmp/llmbench/$name/summary/BENCHMARK_REPORT.md
      sed -n '/^## Results/,/^## Scaling/p;/^## Strategy settings/,/^## Memory/p;/^## Where the time goes/,/^## GPU health/p' "$md"
      python3 - /tmp/llmbench/"$name" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/[0-9]*-*/*_results/result.json")):
    d = json.load(open(f))
    s = d.get("straggler") or {}
    worst = max(s.get("measures") or [], key=lambda m: m["excess_sec"] / (m["bound_sec"] or 1), default=None)
    print(f"{d['strategy']:>13} ws{d['world_size']} {d.get('settings_variant') or 'defaults':<30} tok/s {d['tokens_per_sec'] or 0:>9.0f} "
          f"straggler {s.get('rank')} cost {s.get('cost_sec_per_step') or 0:.3f} s; largest excess/bound "
          + (f"{worst['name']} {worst['excess_sec']:.4f}/{worst['bound_sec']:.4f} s" if worst else "-"))
PY
      tar czf "$OUT/$name.tgz" -C /tmp/llmbench "$name" ;;
    *) echo "unknown part $part: small, large, versus or report" >&2; exit 2 ;;
  esac
done
