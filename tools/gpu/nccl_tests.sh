#!/usr/bin/env bash
# nccl-tests' own sweep on this host's GPUs: the reference the link probe (worker/link_probe.py)
# is held against. The binaries are NVIDIA/nccl-tests built elsewhere against the NCCL torch uses
# (not committed: a local copy in .nccl-tests/bin, carried to the GPU host):
#   make -C .nccl-tests/src BUILDDIR=/tmp/nt NCCL_HOME=<nvidia-nccl-cu13's nvidia/nccl> \
#     CUDARTLIB=cudart_static NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
#     /tmp/nt/all_reduce_perf /tmp/nt/all_gather_perf /tmp/nt/reduce_scatter_perf
# Run in one process over every visible GPU (-g N), bf16, 1 MiB to 1 GiB, 5 warm-up and 20 timed
# iterations, as llmbench's probe measures (it times 10 after 3).
#   tools/gpu/nccl_tests.sh OUTFILE [NGPUS]
set -uo pipefail
out=$1
n=${2:-$(nvidia-smi -L | wc -l)}
lib=$(python3 -c 'import importlib.util as u; print(u.find_spec("nvidia.nccl").submodule_search_locations[0] + "/lib")')
for test in all_reduce all_gather reduce_scatter; do
  LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} .nccl-tests/bin/${test}_perf \
    -b 1M -e 1G -f 4 -g "$n" -d bfloat16 -w 5 -n 20 2>&1
done | tee "$out"
