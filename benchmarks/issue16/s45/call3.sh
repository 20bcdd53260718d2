#!/usr/bin/env bash
# What session 45 left owed on the H200, for the next call that gets one (~540 s): P2 again (session 45's host was
# slow: its batch-1 step waited on it), P4 and the fused-vs-plain tokens (last run on an H100, f6201aa), then
# `tests/gpu` whole (its last whole run was on an H100, 4fd8be1). Prepare .gpu as s40/call.sh says.
#   S45_SECS=540 bash benchmarks/issue16/s45/call3.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S45_SECS:-540}  # a shorter call where less device time is left
run_for 300 python3 benchmarks/bench_gpu.py p2 p4 tokens
cp benchmarks/results.json $OUT/results.json
run_for 240 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
echo "call done ($SECONDS s)" >>$LOG
