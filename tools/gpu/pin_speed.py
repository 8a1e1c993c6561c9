"""What pinning host memory costs a rank, under each of torch's pinned-allocator settings.

DeepSpeed's CPU offload pins its fp32 partitions as `pin_memory: true` asks (`tensor.pin_memory()`,
served by torch's caching host allocator). On a fresh 1x H100 that set-up took about 8 s of
zero2_offload's 12.9 s (docs/results/2026-11-26-h100-pretrain-fresh-host). Each setting runs in a
process of its own (the allocator reads its configuration once), which pins `--copies` tensors of
`--gb` GB each the way DeepSpeed does, copies one to the GPU and back to check the link's speed is
unchanged, and exits; the parent times the exit too (freeing pinned memory happens there).
`--exits normal,hard` also times the exit by os._exit (no interpreter shutdown, no C++ static
destructors: the driver releases the pinned pages when the process goes) against a normal one,
as a warm rank that held an offload configuration's pinned buffers exits at the session's end.

    python3 tools/gpu/pin_speed.py --json $OUT/pin.json
    python3 tools/gpu/pin_speed.py --settings default --exits normal,hard --json $OUT/exit.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
SETTINGS = {
    "default (cudaHostAlloc)": "",
    "cudaHostRegister, 8 threads": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
}


def child(gb: float, copies: int, exit_mode: str) -> None:
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    n = int(gb * 2**30 / 4)
    pin_s = []
    pinned = []
    for _ in range(copies):
        t = torch.ones(n, dtype=torch.float32)  # resident pageable pages, as DeepSpeed's partitions are
        start = time.perf_counter()
        pinned.append(t.pin_memory())
        pin_s.append(time.perf_counter() - start)
        del t
    dev = torch.empty(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    dev.copy_(pinned[0], non_blocking=True)
    torch.cuda.synchronize()
    h2d = gb / (time.perf_counter() - start)
    start = time.perf_counter()
    pinned[0].copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    d2h = gb / (time.perf_counter() - start)
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 2**20
    print(json.dumps({"pin_sec": pin_s, "h2d_gb_per_sec": h2d, "d2h_gb_per_sec": d2h, "peak_rss_gb": hwm,
                      "exiting_at": time.time()}), flush=True)  # fmt: skip
    if exit_mode == "hard":
        sys.stderr.flush()
        os._exit(0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=4.5, help="GB per pinned tensor (llama-1b fp32: 4.5)")
    ap.add_argument("--copies", type=int, default=3, help="how many (fp32 master, Adam's two moments: 3)")
    ap.add_argument("--rounds", type=int, default=2, help="each setting this many times, alternating")
    ap.add_argument("--settings", default="both", choices=("both", "default"), help="which settings")
    ap.add_argument("--exits", default="normal", help="exit modes to time, comma-separated: normal, hard")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--exit-mode", default="normal", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.gb, args.copies, args.exit_mode)
        return 0
    settings = SETTINGS if args.settings == "both" else dict(list(SETTINGS.items())[:1])
    cases = [(f"{name}, {mode} exit" if mode != "normal" else name, conf, mode)
             for name, conf in settings.items() for mode in args.exits.split(",")]  # fmt: skip
    out: dict[str, list] = {name: [] for name, _, _ in cases}
    for name, conf, mode in [case for _ in range(args.rounds) for case in cases]:
        env = {k: v for k, v in os.environ.items() if k not in CONF_VARS}
        if conf:
            env["PYTORCH_ALLOC_CONF"] = conf
        start = time.time()
        cmd = [sys.executable, __file__, "--child", "--gb", str(args.gb), "--copies", str(args.copies),
               "--exit-mode", mode]  # fmt: skip
        proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)
        ended = time.time()
        if proc.returncode != 0:
            print(f"{name}: exit {proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["exit_sec"] = ended - row.pop("exiting_at")
        row["process_sec"] = ended - start
        row["conf"] = conf
        out[name].append(row)
        pins = " ".join(f"{s:.2f}" for s in row["pin_sec"])
        print(
            f"{name:30s} pin {pins} s   exit {row['exit_sec']:.2f} s   h2d {row['h2d_gb_per_sec']:.1f} GB/s"
            f"   d2h {row['d2h_gb_per_sec']:.1f} GB/s   peak rss {row['peak_rss_gb']:.1f} GB"
            f"   process {row['process_sec']:.1f} s"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gb": args.gb, "copies": args.copies, "settings": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
