#!/usr/bin/env bash
# Session 45's short call (little device time left): the unsplit graphs' GPU test, then on an H200 issue 16's targets
# at this commit with two of session 44's engines beside them (tcbase: TC_WHOLE's twin; tcwhole16: the pages-of-16
# lead), on an H100 `tcpair`; then `tests/gpu/test_graphs.py` if time is left.
#   S45_SECS=300 bash benchmarks/issue16/s45/call2.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S45_SECS:-300}  # a shorter call where less device time is left
run_for 60 python3 -m pytest -q tests/gpu/test_graphs.py -k "unsplit or balanced" -p no:cacheprovider -rfs
if [ $h200 = 1 ]; then
  TCWHOLE_ENGINES=tcbase,tcwhole16 run_for 230 python3 benchmarks/bench_gpu.py p1 p2 tcwhole
else
  run_for 150 python3 benchmarks/bench_gpu.py tcpair
fi
cp benchmarks/results.json $OUT/results.json
run_for 120 python3 -m pytest -q tests/gpu/test_graphs.py -p no:cacheprovider -rfs -k "not unsplit and not balanced"
echo "call done ($SECONDS s)" >>$LOG
