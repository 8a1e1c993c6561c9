#!/usr/bin/env bash
# Run a slice of the suite on a GPU host and bring its results back through $OUT.
#   tools/gpu/run.sh NAME [pytest arguments...]
# Results go to /tmp/llmbench/NAME (the machine keeps nothing), are packed as $OUT/NAME.tgz, and a
# one-line summary per run is printed last.
# RUN_TIMEOUT=SECONDS stops pytest (SIGTERM: the run in progress is recorded as interrupted) and
# still packs what finished, so one slow slice cannot lose a whole device call.
# RUN_PACK=0 leaves the packing to the caller (a script that packs several slices as one file).
set -uo pipefail
name=$1; shift
dir=/tmp/llmbench/$name
mkdir -p "$dir"
limit=()
[ "${RUN_TIMEOUT:-0}" -gt 0 ] && limit=(timeout --foreground --kill-after=30 "$RUN_TIMEOUT")  # pytest alone: it stops its ranks and records them
"${limit[@]}" pytest benchmarks/ -p no:cacheprovider -q --llmbench-results-dir="$dir" \
  --benchmark-json="$dir/benchmark.json" "$@" 2>&1 | tail -15
[ "${RUN_PACK:-1}" = 1 ] && tar czf "$OUT/$name.tgz" -C /tmp/llmbench "$name"
python3 - "$dir" <<'PY'
import glob, json, sys
# each session's runs are in its own folder (results/storage.py); older layouts had them directly here
for f in sorted(glob.glob(sys.argv[1] + "/[0-9]*-*/*_results/result.json") + glob.glob(sys.argv[1] + "/*_results/result.json")):
    d = json.load(open(f))
    c = d.get("communication") or {}
    print(f"{d['strategy']:>14} ws{d['world_size']} seq{d['seq_len']} b{d['per_device_batch']} {d['status']:>5} tok/s {d['tokens_per_sec'] or 0:>9.0f} "
          f"mfu {d['mfu'] or 0:.3f} cv {d.get('step_cv_in_run', d.get('step_time_cv')) or 0:.3f} peak {d['peak_vram_gb'] or 0:.1f} "
          f"state {d['model_state_gb'] or 0:.2f}/{d['model_state_predicted_gb'] or 0:.2f} "
          f"comm {c.get('comm_sec_per_step') or 0:.3f} exp {c.get('comm_exposed_sec_per_step') or 0:.3f} "
          f"bus {c.get('bus_gbps') or 0:.0f} h2d {d['h2d_gbps_per_gpu'] or 0:.2f}/{d['h2d_link_gbps'] or 0:.1f} "
          f"util {d['gpu_util_pct'] or 0:.0f} thr {d['throttled']} clk {d['timing']['events_vs_clock'] or 0:+.4f} "
          + (f"opt {d['optimizer']} r{d['lora_rank']} {d['dtype']} samples/s {d['samples_per_sec'] or 0:.2f} "
             f"$/1k {d.get('cost_per_1k_samples_usd') or 0:.4f} " if d.get("workload") == "lora" else "")
          + (f"{d.get('data')} epoch-samples/s {d.get('epoch_samples_per_sec') or 0:.0f} "
             f"wait {d.get('data_wait_fraction') or 0:.3f} idle {d.get('idle_fraction') or 0:.3f} " if d.get("epochs") else "")
          + (f"loss {d.get('fused_loss')} fp8 {d.get('fp8')} attn {d.get('attention')} ran {d.get('attention_ran')} "
             f"compile {d.get('compile')} mfu/fp8peak {d.get('mfu_vs_fp8_peak') or 0:.3f} "
             if (d.get('fused_loss'), d.get('fp8'), d.get('attention')) != ('none', 'none', 'default') or d.get('attention_ran') else "")
          + f"{(d['error'] or '')[:200]}")
PY
