#!/usr/bin/env bash
# Session 41's call 4: call 3 (H100, 2984b60) found the faulting launch with CUDA_LAUNCH_BLOCKING: FlashInfer's
# prefill kernel, in the eager warm-up before the dummy-page test's first capture (the mixed graph of 16 decode rows
# and 512 prompt rows); test_graphs.py alone hung there; the two tests alone passed. diag_plugin.py checks, after
# each prefill plan, what the prefill wrapper will read against the step's arguments.
# bash benchmarks/issue16/s41/call4.sh
source benchmarks/issue16/call_env.sh
PYTHONPATH=benchmarks/issue16/s41:$PYTHONPATH r timeout 150 python3 -m pytest -x -q -p no:cacheprovider -p diag_plugin tests/gpu
grep -c "DIAG" $LOG >>$LOG
echo "call done" >>$LOG
