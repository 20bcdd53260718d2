#!/usr/bin/env bash
# Session 46, call 5: on an H200 the tcwhole engines at pages of 1 (tcsplit, tcwhole0, tcwhole) after P2 with the
# host's own time beside it; on an H100 `tokens` then P2 in one process, call 1's order, to see whether the 1.474 ms
# batch-1 step it read there (1.204 ms alone, call 4) is the host's (p2_decode_step_bs1_host_alone).
#   S46_SECS=330 bash benchmarks/issue16/s46/call5.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S46_SECS:-330}  # a shorter call where less device time is left
if [ $h200 = 1 ]; then
  TCWHOLE_ENGINES=tcsplit,tcwhole0,tcwhole run_for 320 python3 benchmarks/bench_gpu.py p2 tcwhole
else
  run_for 200 python3 benchmarks/bench_gpu.py tokens p2
fi
cp benchmarks/results.json $OUT/results.json
echo "call done ($SECONDS s)" >>$LOG
