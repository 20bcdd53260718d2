#!/usr/bin/env bash
# Session 41's call 2: tests/gpu died of an illegal memory access in its second whole run at 53254bf (call 1, H100:
# tests/gpu/test_graphs.py's dummy-page test and the next failed, then the process aborted). The conftest now waits for
# the device after every test (a fault fails the test that launched it) and writes a failure out before the
# summary. Three whole runs (-x), then the dummy-page test under compute-sanitizer's memcheck.
# Prepare .gpu as benchmarks/issue16/s40/call.sh says.   bash benchmarks/issue16/s41/call2.sh
source benchmarks/issue16/call_env.sh
for run in 1 2 3; do
  r timeout 170 python3 -m pytest -x -q tests/gpu -p no:cacheprovider -rfs
done
grep -c "function reset" $LOG >>$LOG  # 0: no graph was destroyed while one was being captured
r timeout 150 compute-sanitizer --tool memcheck --print-limit 5 python3 -m pytest -x -q -p no:cacheprovider \
  tests/gpu/test_graphs.py -k dummy_page
echo "call done" >>$LOG
