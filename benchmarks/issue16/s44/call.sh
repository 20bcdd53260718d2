#!/usr/bin/env bash
# Session 44's call. On an H200: as s43/call.sh (issue 16's targets at this commit, read_rate.py, tc_whole.py,
# `tests/gpu`). On an H100 it no longer runs nothing: the unsplit tensor-core graph probe (`s43/tc_whole.py`,
# never run) and `tests/gpu` over a0483f0's PrefillGrid.requests/tiles (never run on a GPU).
#   bash benchmarks/issue16/s44/call.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash benchmarks/issue16/s43/call.sh
fi
source benchmarks/issue16/call_env.sh
r timeout 90 python3 benchmarks/issue16/s43/tc_whole.py
r timeout 200 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
echo "call done" >>$LOG
