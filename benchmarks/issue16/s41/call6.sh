#!/usr/bin/env bash
# Session 41's call 6: issue 16's targets on an H200 at this commit, only if an H200 answers (an H100 returns at
# once: its figures are session 40's).   bash benchmarks/issue16/s41/call6.sh
source benchmarks/issue16/call_env.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 170 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
echo "call done" >>$LOG
