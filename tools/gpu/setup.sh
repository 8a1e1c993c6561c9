#!/usr/bin/env bash
# On an offline GPU host: install the carried wheels (DeepSpeed and its small dependencies,
# bitsandbytes for paged_adamw_8bit, liger-kernel and torchao for --llmbench-fused-loss=liger and
# --llmbench-fp8, built by `../shared/tools/wheelhouse.sh .whl NAME==VERSION` into .whl/), point
# DeepSpeed's async-I/O build (zero3_nvme) at the carried libaio, and register this checkout's plugin.
#   source tools/gpu/setup.sh
# bytecode compiled at install, as pip does by default: a first session on a fresh host should not
# pay for compiling DeepSpeed's and torchao's modules, which no user's installed package does
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
# DeepSpeed JIT-builds its async-I/O op for zero3_nvme against libaio (header and library), which
# these hosts lack: .whl/libaio carries both; the compiler and the loader must see them first
if [ -d .whl/libaio ]; then
  A=$PWD/.whl/libaio
  export CPATH=$A${CPATH:+:$CPATH} LIBRARY_PATH=$A${LIBRARY_PATH:+:$LIBRARY_PATH} LD_LIBRARY_PATH=$A${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# the pytest11 entry point and the `llmbench` command need an installed distribution
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/llmbench-install.log 2>&1 \
  || { echo "editable install failed:"; tail -5 /tmp/llmbench-install.log; }
export PYTHONUNBUFFERED=1
# this checkout's own bytecode, as installing a wheel of it would compile it: an editable install
# has none, and with PYTHONDONTWRITEBYTECODE (below) every new process compiled llmbench_pytest's
# modules again (1.2 s of a fresh rank's start on 1x H100, py-spy, 2026-11-26,
# docs/results/2026-11-26-h100-pretrain-fresh-host-4)
python3 -m compileall -q -j 0 llmbench_pytest >/dev/null 2>&1 || echo "llmbench_pytest's bytecode not compiled"
# bytecode for the image's own packages: these hosts set PYTHONDONTWRITEBYTECODE=1 and their torch,
# sympy, numpy and triton carry no .pyc, so every new process compiled them again (14.7 s of a
# first llama-1b rank on 1x H100, 2026-11-26, docs/results/2026-11-26-h100-pretrain-fresh-host).
# Files that already have current bytecode are skipped; compileall writes whatever that variable says
SITE=$(python3 -c 'import importlib.util as u, os; print(os.path.dirname(os.path.dirname(u.find_spec("torch").origin)))' 2>/dev/null)
if [ -n "$SITE" ]; then
  start=$(date +%s.%N)
  python3 -m compileall -q -j 0 "$SITE" >/tmp/llmbench-compileall.log 2>&1 || true
  echo "bytecode of $SITE ready in $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
else
  echo "no torch found: its bytecode is not compiled ahead"
fi
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -1
python3 - <<'PY'
import importlib.metadata as m
print("  ".join(f"{p} {m.version(p)}" if list(m.distributions(name=p)) else f"{p}: not installed" for p in ("liger-kernel", "torchao")))
PY
echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"
