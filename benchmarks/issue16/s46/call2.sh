#!/usr/bin/env bash
# Session 46, call 2: where a graph decode step's host time goes (host_step.py: phases, cProfile, a torch.profiler
# trace at batch 1 and 256; on any card); the graph and FlashInfer GPU tests over the lanes hook (AttentionBackend.lanes);
# then on an H200 P2 again (batch 1 on a usual host?) and the tcwhole engines session 45 could not run there.
# Prepare .gpu as s40/call.sh says.
#   S46_SECS=400 bash benchmarks/issue16/s46/call2.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S46_SECS:-400}  # a shorter call where less device time is left
run_for 120 python3 benchmarks/issue16/s46/host_step.py $OUT
run_for 120 python3 -m pytest -q tests/gpu/test_graphs.py tests/gpu/test_flashinfer.py -p no:cacheprovider -rfs
if [ $h200 = 1 ]; then
  TCWHOLE_ENGINES=tcsplit,tcwhole0,tcwhole run_for 240 python3 benchmarks/bench_gpu.py p2 tcwhole
  cp benchmarks/results.json $OUT/results.json
fi
echo "call done ($SECONDS s)" >>$LOG
