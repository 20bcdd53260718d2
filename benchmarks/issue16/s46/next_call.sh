#!/usr/bin/env bash
# What session 46 left owed on the H200, for the next call that gets one (~300 s): P4 and the fused-vs-plain tokens
# (both last on an H100, 9827efb), P2 again (the host's own time beside each step: does this machine's host set the
# pace at batch 1?), then the two GPU test files that ran on the H100 only (moe, sampling). Prepare .gpu as
# s40/call.sh says.
#   S46_SECS=300 bash benchmarks/issue16/s46/next_call.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S46_SECS:-300}  # a shorter call where less device time is left
run_for 200 python3 benchmarks/bench_gpu.py p2 p4 tokens
cp benchmarks/results.json $OUT/results.json
run_for 90 python3 -m pytest -q tests/gpu/test_moe_gpu.py tests/gpu/test_sampling_gpu.py -p no:cacheprovider -rfs
echo "call done ($SECONDS s)" >>$LOG
