#!/usr/bin/env bash
# Session 41's call 3: call 2 failed three whole runs of tests/gpu out of three at the same place (H100, 32de3a1):
# test_graphs.py's dummy-page test, an illegal memory access during the first capture's eager warm-up forwards,
# after 61 passing tests; the test alone passed, also under memcheck. Which earlier tests are needed, and which
# launch faults: test_graphs.py alone, two tests alone, the whole suite with CUDA_LAUNCH_BLOCKING (the failing launch
# raises), then test_graphs.py under memcheck.   bash benchmarks/issue16/s41/call3.sh
source benchmarks/issue16/call_env.sh
T="python3 -m pytest -x -q -p no:cacheprovider"
r timeout 100 $T tests/gpu/test_graphs.py
r timeout 100 $T tests/gpu/test_graphs.py -k "wave_rule or dummy_page"
CUDA_LAUNCH_BLOCKING=1 r timeout 150 $T tests/gpu
r timeout 200 compute-sanitizer --tool memcheck --print-limit 5 $T tests/gpu/test_graphs.py
echo "call done" >>$LOG
