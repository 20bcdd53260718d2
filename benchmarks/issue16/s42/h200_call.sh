#!/usr/bin/env bash
# Session 42: issue 16's H200 reading at this commit, only if an H200 answers (an H100 answering costs only the start).
# First the targets with P1's breakdown (`bench_gpu.py p1 p1b p2`), then `tests/gpu` once (the H200 last ran it at
# 5e7239a; the H100 ran it clean three times since clean_schedule). Prepare .gpu as benchmarks/issue16/s40/call.sh says.
#   bash benchmarks/issue16/s42/h200_call.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if ! grep -q H200 <<<"$gpu"; then echo "$gpu answered: nothing run"; exit 0; fi
source benchmarks/issue16/call_env.sh
r timeout 240 python3 benchmarks/bench_gpu.py p1 p1b p2
cp benchmarks/results.json $OUT/results.json
r timeout 200 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
echo "call done" >>$LOG
