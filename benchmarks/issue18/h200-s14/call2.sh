#!/usr/bin/env bash
# Session 14, call 2: pytest tests/gpu (the mixed-budget rule's later mends had not run on the H200), then
# scripts/gpu_serve.sh at the target rate only (0.5 x the measured peak), its load now read by 4 client processes.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 200 python3 -m pytest -q -x tests/gpu
GPU_SERVE_RATES=0.5x GPU_SERVE_LIMIT=140 bash scripts/gpu_serve.sh
echo "call2: exit status $status" | tee -a "$LOG"
