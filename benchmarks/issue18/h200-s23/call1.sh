#!/usr/bin/env bash
# Session 23, call 1: where SmolLM2's ~0.45 ms between the step p99 and the ITL p99 lies.
# 1. gpu_serve.sh at the target rate, four runs: step p99 -> emission p99 (emit_p99_ms) -> API receive -> client.
# 2. One traced serve run at the same rate; tail.py splits the token-weighted emission intervals by step phase.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
GPU_SERVE_MODELS=${CALL_MODELS:-smollm2-135m} GPU_SERVE_RATES=${CALL_RATES:-0.5x,0.5x,0.5x,0.5x} \
    GPU_SERVE_LIMIT=${CALL_LIMIT:-200} OUT=$OUT run bash scripts/gpu_serve.sh
if [ "${CALL_TRACE:-1}" = 1 ]; then
    N=256 run timeout 150 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py benchmarks/configs/smollm2-135m \
        ${CALL_TRACE_RATE:-46} $OUT
    run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_smollm2-135m.json 2.8
    (cd $OUT && tar -czf traces.tgz trace_*.json && rm -f trace_smollm2-135m.json)
fi
echo "call1: exit status $status" | tee -a "$LOG"
