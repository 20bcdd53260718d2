#!/usr/bin/env bash
# Session 15, call 1: does a mixed step's launch wait for the GPU anywhere, and where does its host time go now?
# launch_phases.py at HEAD: the phases with the GPU idle, then behind 4 ms of queued GPU work (--busy-ms, new), then
# the host's operations per step.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 240 python3 benchmarks/launch_phases.py --busy-ms 4 --ops
echo "call1: exit status $status" | tee -a "$LOG"
