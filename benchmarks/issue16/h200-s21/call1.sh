#!/usr/bin/env bash
# Session 21, call 1: the two-micro-batch probe (benchmarks/tbo_probe.py) at 128 and 256 requests, context 1k.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run timeout 400 python3 benchmarks/tbo_probe.py --bs 64,128,256 --json $OUT/tbo_probe.json
echo "call1: exit status $status" | tee -a "$LOG"
