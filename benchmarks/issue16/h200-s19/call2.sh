#!/usr/bin/env bash
# Session 19, call 2: the plan fence's host cost (its parts alone; launch_phases with the fence on/off in ABBA);
# the greedy kernel (greedy.cu) against torch.argmax, and a decode step's kernels at 128 and 256 with it;
# TCWHOLE's unsplit tensor-core graphs (call 1 timed out there) beside the default engine.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
run timeout 30 python3 benchmarks/issue16/h200-s19/fence_cost.py
run timeout 100 python3 benchmarks/launch_phases.py --fence-ab --busy-ms 4
run timeout 120 python3 -m pytest -q tests/gpu/test_sampling_gpu.py tests/gpu/test_llm_cuda.py
run timeout 90 python3 benchmarks/profile_decode.py greedy --bs 128,256 --json $OUT/profile_greedy.jsonl
run timeout 300 python3 benchmarks/bench_gpu.py tcwhole
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call2: exit status $status" | tee -a "$LOG"
