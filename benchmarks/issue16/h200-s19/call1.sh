#!/usr/bin/env bash
# Session 19, call 1: `pytest tests/gpu` at main (pages and the plan fence on by default, never run whole there);
# TCWHOLE: the tensor-core decode kernel for every step, its graph plans unsplit (pages of 1 and 16), beside the
# default engine in the same run; the host phases of a decode and a mixed step with and without the plan fence.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 200 python3 -m pytest -q tests/gpu
run timeout 260 python3 benchmarks/bench_gpu.py tcwhole
run timeout 100 python3 benchmarks/launch_phases.py --busy-ms 4
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call1: exit status $status" | tee -a "$LOG"
