#!/usr/bin/env bash
# Session 44's call, in order of what is owed, each step cut to the time left of ~570 s. On an H200 first issue 16's
# targets at this commit (`bench_gpu.py p1 p2`; the H200 last ran them at 5e7239a). Then, on either card: the
# tensor-core decode kernel unsplit in a graph, alone (`s43/tc_whole.py`, never run), the engine's TC_WHOLE graphs
# (their GPU test alone first: session 18's hung), `bench_gpu.py tcwhole` if that test finished, `tests/gpu` (a0483f0's
# PrefillGrid views have not run on a GPU), and on an H200 read_rate.py last. Prepare .gpu as s40/call.sh says.
#   bash benchmarks/issue16/s44/call.sh
source benchmarks/issue16/call_env.sh
left() { echo $(( ${S44_SECS:-570} - SECONDS )); }  # S44_SECS: a shorter call where less device time is left
cap() { local t=$(( $(left) < $1 ? $(left) : $1 )); [ "$t" -gt 20 ] && echo "$t" || echo 0; }
run_for() { local t; t=$(cap "$1"); shift; if [ "$t" = 0 ]; then echo "=== skipped (no time): $*" >>$LOG; return 1; fi
  r timeout "$t" "$@"; }
h200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
if [ $h200 = 1 ]; then
  run_for 170 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
run_for 90 python3 benchmarks/issue16/s43/tc_whole.py
run_for 150 python3 -m pytest -q tests/gpu/test_graphs.py -k unsplit -p no:cacheprovider -rfs
if tail -n 3 $LOG | grep -q "1 passed"; then
  run_for 240 python3 benchmarks/bench_gpu.py tcwhole
  cp benchmarks/results.json $OUT/results.json
fi
run_for 200 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs --deselect \
  tests/gpu/test_graphs.py::test_unsplit_tensor_core_graphs_finish_and_give_what_the_split_ones_give
[ $h200 = 1 ] && run_for 40 python3 benchmarks/issue16/s42/read_rate.py
echo "call done ($SECONDS s)" >>$LOG
