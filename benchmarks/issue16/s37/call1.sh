#!/usr/bin/env bash
# Session 37, call 1: first the pipelined product (benchmarks/kernels/pipe_gemm.cu, lt_probe.py --pipe) at 16-256
# rows against torch, each configuration checked against a float product; then the model's graph step at 32-256
# requests with each product's fastest configuration where it beat torch (profile_decode.py --pipe) against as it
# is; then session 36's call 4 as written (skinny_gemm.cu's G/A variants); then, only if the card is an H200, issue
# 16's targets at this commit (bench_gpu.py p1 p2).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 150 python3 benchmarks/lt_probe.py --pipe --json $OUT/pipe.json
if [ -s $OUT/pipe.json ]; then
  r timeout 100 python3 benchmarks/profile_decode.py pipe --pipe $OUT/pipe.json --bs 32,64,128,256 --json $OUT/profile.jsonl
  r timeout 100 python3 benchmarks/profile_decode.py base --bs 32,64,128,256 --json $OUT/profile.jsonl
fi
bash benchmarks/issue16/s36/call4.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 240 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
echo call1 done >>$LOG
