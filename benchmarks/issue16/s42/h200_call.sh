#!/usr/bin/env bash
# Session 42's call. On an H200: issue 16's targets at this commit (`bench_gpu.py p1
# p2`); read_rate.py and the decode attention alone (`lt_probe.py --attn`): does the H200 read faster than it
# copies?; then `tests/gpu` once (the H200 last ran it at 5e7239a). On an H100 nothing, unless S42_H100=1: then
# read_rate.py, fused-vs-plain tokens and P4 (`bench_gpu.py tokens p4`; call 2 ran it). Prepare .gpu as
# benchmarks/issue16/s40/call.sh says.
#   bash benchmarks/issue16/s42/h200_call.sh
source benchmarks/issue16/call_env.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 170 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
  r timeout 40 python3 benchmarks/issue16/s42/read_rate.py
  r timeout 60 python3 benchmarks/lt_probe.py --attn --bs 64,128,256
  r timeout 170 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
elif [ "${S42_H100:-0}" = 1 ]; then  # the H100 branch: call 2 ran it; later calls only with S42_H100=1
  r timeout 40 python3 benchmarks/issue16/s42/read_rate.py
  r timeout 300 python3 benchmarks/bench_gpu.py tokens p4
  cp benchmarks/results.json $OUT/results.json
fi
echo "call done" >>$LOG
