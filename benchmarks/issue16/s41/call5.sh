#!/usr/bin/env bash
# Session 41's call 5: the fix (attention/flashinfer.py clean_schedule: a CUDA graph wrapper's page-locked schedule
# buffer zeroed before its first plan). Call 4 found the prefill wrapper's buffers right, so the fault was in the
# schedule: FlashInfer's graph prefill plan without split-KV leaves the spare blocks' request indices as the recycled
# page-locked memory held them. The new test (with its mutant), then tests/gpu whole, twice.
# bash benchmarks/issue16/s41/call5.sh
source benchmarks/issue16/call_env.sh
T="python3 -m pytest -q -p no:cacheprovider -rfs"
r timeout 60 $T tests/gpu/test_graphs.py -k no_block_outside
for run in 1 2; do
  r timeout 170 $T tests/gpu
done
grep -c "function reset" $LOG >>$LOG  # 0: no graph was destroyed while one was being captured
echo "call done" >>$LOG
