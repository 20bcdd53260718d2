#!/usr/bin/env bash
# Session 24, call 2: gpu_serve.sh with the default replies (plain sockets): SmolLM2 at the target rate four times
# (serve / offline all at once, TTFT p99, ITL p99 / median decode step), then Qwen3 at its target rate twice.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
GPU_SERVE_MODELS=smollm2-135m GPU_SERVE_RATES=0.5x,0.5x,0.5x,0.5x GPU_SERVE_LIMIT=${CALL_LIMIT_S:-230} OUT=$OUT/smollm2 \
    run bash scripts/gpu_serve.sh
GPU_SERVE_MODELS=qwen3-0.6b GPU_SERVE_RATES=0.5x,0.5x GPU_SERVE_LIMIT=${CALL_LIMIT_Q:-200} OUT=$OUT/qwen3 \
    run bash scripts/gpu_serve.sh
tar -czf $OUT/qwen3.tgz -C $OUT qwen3 && rm -rf $OUT/qwen3
echo "call2: exit status $status" | tee -a "$LOG"
