#!/usr/bin/env bash
# Session 21, calls 1 and 2: the two-micro-batch probe (benchmarks/tbo_probe.py) at 128 and 256 requests, context 1k.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call${CALL:-1}.log
run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run timeout 400 python3 benchmarks/tbo_probe.py --bs 64,128,256 --json $OUT/tbo_probe${CALL:-1}.json
echo "call${CALL:-1}: exit status $status" | tee -a "$LOG"
