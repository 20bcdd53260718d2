#!/usr/bin/env bash
# Session 18, call 4: p1b's illegal access, diagnosed as a FlashInfer plan overwritten before the GPU copied it
# (fence_check.py): PLAN_FENCE on (the fix), sync (the truth), off (the bug).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call4.log
for m in on sync off; do run timeout 60 python3 benchmarks/issue16/h200-s18/fence_check.py $m; done
echo "call4: exit status $status" | tee -a "$LOG"
