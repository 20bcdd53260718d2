#!/usr/bin/env bash
# Session 46, call 3: P2 with the host's own time per step beside it (p2_decode_step_bs*_host_alone: is a step bound by
# the host?) on any card; on an H200 also the tcwhole engines session 45 could not run there (pages of 1: tcsplit,
# tcwhole0, tcwhole), in the same process. Prepare .gpu as s40/call.sh says.
#   S46_SECS=330 bash benchmarks/issue16/s46/call3.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S46_SECS:-330}  # a shorter call where less device time is left
if [ $h200 = 1 ]; then
  TCWHOLE_ENGINES=tcsplit,tcwhole0,tcwhole run_for 320 python3 benchmarks/bench_gpu.py p2 tcwhole
else
  run_for 120 python3 benchmarks/bench_gpu.py p2
fi
cp benchmarks/results.json $OUT/results.json
echo "call done ($SECONDS s)" >>$LOG
