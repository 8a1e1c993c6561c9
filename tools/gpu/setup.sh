#!/usr/bin/env bash
# On an offline GPU host: install the carried wheels (DeepSpeed and its small dependencies, and
# bitsandbytes for paged_adamw_8bit, built here by `../shared/tools/wheelhouse.sh .whl
# bitsandbytes==0.50.2` into .whl/) and register this checkout's pytest plugin.
#   source tools/gpu/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
# the pytest11 entry point and the `llmbench` command need an installed distribution
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/llmbench-install.log 2>&1 \
  || { echo "editable install failed:"; tail -5 /tmp/llmbench-install.log; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -1
echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"
