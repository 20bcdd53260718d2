#!/usr/bin/env bash
# Session 36, call 3: P1 and P2 with the 2-16-row GEMM on by default and its naive twin (bench_gpu.py's skinny and
# noskinny experiments: 2, 8, 16 requests, and P1 without it) in one run; then Nsight Compute on one q|k|v product
# at 16 and 64 rows, skinny_gemm.cu against cuBLAS (ncu_skinny.py), to find what grows with the rows.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 300 python3 benchmarks/bench_gpu.py p1 p2 skinny noskinny
cp benchmarks/results.json $OUT/results.json
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for m in 16 64; do
  r timeout 50 $NCU --clock-control none --kernel-name-base function --kernel-name "regex:skinny|nvjet|gemm|xmma|cutlass" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
    --section SchedulerStats python3 benchmarks/issue16/s36/ncu_skinny.py $m
done
echo done >>$LOG
