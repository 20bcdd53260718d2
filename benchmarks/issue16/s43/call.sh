#!/usr/bin/env bash
# Session 43's call. On an H200: issue 16's targets at this commit (`bench_gpu.py p1 p2`), read_rate.py (does
# the H200 read faster than it copies?), the decode attention alone with the tensor-core kernel unsplit in a graph
# (`s43/tc_whole.py`), then `tests/gpu` once (the H200 last ran it at 5e7239a). On an H100 nothing, unless
# S43_H100=2 (tc_whole.py only) or S43_H100=1: then read_rate.py as c9c7d77 left it
# (timed by bench.time_steps), spare_blocks.py and `tests/gpu` over session 43's PrefillGrid / gc_paused(collect=False)
# (call 1 ran it at 70f53e2). Prepare .gpu as
# benchmarks/issue16/s40/call.sh says.
#   bash benchmarks/issue16/s43/call.sh
source benchmarks/issue16/call_env.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 170 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
  r timeout 40 python3 benchmarks/issue16/s42/read_rate.py
  r timeout 90 python3 benchmarks/issue16/s43/tc_whole.py
  r timeout 170 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
elif [ "${S43_H100:-0}" = 2 ]; then  # the unsplit tensor-core graph on an H100: does it finish now?
  r timeout 90 python3 benchmarks/issue16/s43/tc_whole.py
elif [ "${S43_H100:-0}" = 1 ]; then
  r timeout 40 python3 benchmarks/issue16/s42/read_rate.py
  r timeout 60 python3 benchmarks/issue16/s41/spare_blocks.py --reps 20
  r timeout 200 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
fi
echo "call done" >>$LOG
