#!/usr/bin/env bash
# Session 22, call 1: the bench client timed by each read's arrival (kernel stamps) beside its read time.
# 1. client_jitter.py on the H200's host: an exact 1.4 ms cadence, read by one and by four client processes.
# 2. gpu_serve.sh at the target rate, repeated (fresh prompts each run): every run gives the ITL p99 by both clocks.
#    CALL_MODELS picks the models (default SmolLM2), CALL_RATES the runs.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
if [ "${CALL_JITTER:-1}" = 1 ]; then
    run timeout 120 python3 benchmarks/client_jitter.py --streams 40 --tokens 300 --loop asyncio --client-procs 1 4 \
        --repeats 3 --out "$OUT/client_jitter.json"
fi
GPU_SERVE_MODELS=${CALL_MODELS:-smollm2-135m} GPU_SERVE_RATES=${CALL_RATES:-0.5x,0.5x,0.5x,0.5x,0.5x,0.5x} \
    GPU_SERVE_LIMIT=${CALL_LIMIT:-260} OUT=$OUT run bash scripts/gpu_serve.sh
echo "call1: exit status $status" | tee -a "$LOG"
