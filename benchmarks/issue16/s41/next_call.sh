#!/usr/bin/env bash
# The next session's call (about 6 minutes on an H200): tests/gpu once at this commit (session 41 ran it clean twice on
# an H100 after clean_schedule), spare_blocks.py (any GPU: a ratio in one run), then, on an H200, issue 16's targets (`bench_gpu.py p1 p2`; the H200 last ran the
# engine at 5e7239a, before the skinny GEMM's default and clean_schedule). Prepare .gpu as
# benchmarks/issue16/s40/call.sh says.   bash benchmarks/issue16/s41/next_call.sh
source benchmarks/issue16/call_env.sh
r timeout 170 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
r timeout 90 python3 benchmarks/issue16/s41/spare_blocks.py  # the spare blocks' lead (RESULTS, session 41)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 170 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
echo "call done" >>$LOG
