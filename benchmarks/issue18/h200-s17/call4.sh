#!/usr/bin/env bash
# Session 17, call 4: the lean-plan test again (call 3's copy built more table rows than the engine has), then
# scripts/gpu_serve.sh at the target rate with this commit's defaults (LEAN_PLAN on).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call4.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 120 python3 -m pytest -q tests/gpu/test_graphs.py -k lean_plan
GPU_SERVE_RATES=0.5x GPU_SERVE_LIMIT=140 bash scripts/gpu_serve.sh  # the targets' protocol, this commit
echo "call4: exit status $status" | tee -a "$LOG"
