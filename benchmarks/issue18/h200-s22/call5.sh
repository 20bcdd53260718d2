#!/usr/bin/env bash
# Session 22, call 5: SmolLM2 served with --trace at the target rate (46 req/s), read by four client processes
# timed by arrival: do the scheduler's own emission intervals hold the ~0.45 ms that the client's ITL p99 shows
# above the step-time p99? (trace_tail.py, this folder, reads the trace.)
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call5.log
N=128 LENS="--client-procs 4" run timeout 150 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py \
    benchmarks/configs/smollm2-135m 46 $OUT
run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_smollm2-135m.json 2.8
gzip -f $OUT/trace_smollm2-135m.json
echo "call5: exit status $status" | tee -a "$LOG"
