#!/usr/bin/env bash
# Session 44's short call (little device time left), TC_WHOLE now on by default past split_reqs: its GPU tests
# (the unsplit graphs three ways, the balanced and lean-plan tests), then on an H200 issue 16's targets at this commit
# and TC_WHOLE's twin beside it in one process (`bench_gpu.py p1 p2 tcpair`), on an H100 `tcpair` alone.
#   S44_SECS=200 bash benchmarks/issue16/s44/call2.sh
source benchmarks/issue16/call_env.sh
left() { echo $(( ${S44_SECS:-200} - SECONDS )); }
r timeout 80 python3 -m pytest -q tests/gpu/test_graphs.py -k "unsplit or balanced or lean_plan" -p no:cacheprovider -rfs
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout $(left) python3 benchmarks/bench_gpu.py p1 p2 tcpair
else
  r timeout $(left) python3 benchmarks/bench_gpu.py tcpair
fi
cp benchmarks/results.json $OUT/results.json
echo "call done ($SECONDS s)" >>$LOG
