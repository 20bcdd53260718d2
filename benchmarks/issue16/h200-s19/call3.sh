#!/usr/bin/env bash
# Session 19, call 3: greedy.cu with its loads in flight and float compares (call 2's read 78 MB in 48 us) against
# torch.argmax; its time at 128 and 256 rows; P1, P2 and the fused-on/off token parity at this commit.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
run timeout 150 python3 -m pytest -q tests/gpu/test_sampling_gpu.py tests/gpu/test_fused.py
run timeout 80 python3 benchmarks/profile_decode.py greedy2 --bs 128,256 --json $OUT/profile_greedy2.jsonl
run timeout 260 python3 benchmarks/bench_gpu.py p1 p2 tokens
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call3: exit status $status" | tee -a "$LOG"
