#!/usr/bin/env bash
# Session 25, call 4: the bounded hold (b928677). 1. ttft_probe.py again: seed 104's two late streams. 2. gpu_serve.sh:
# SmolLM2 at the target rate three times, Qwen3 twice (serve / offline all at once, TTFT p99, ITL p99 / step).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call4.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
mkdir -p $OUT/t && OUT=$OUT/t run timeout 200 python3 benchmarks/issue18/h200-s25/ttft_probe.py
rm -f $OUT/t/trace_*.json
GPU_SERVE_MODELS=smollm2-135m GPU_SERVE_RATES=0.5x,0.5x,0.5x GPU_SERVE_LIMIT=200 OUT=$OUT/smollm2 run bash scripts/gpu_serve.sh
GPU_SERVE_MODELS=qwen3-0.6b GPU_SERVE_RATES=0.5x,0.5x GPU_SERVE_LIMIT=170 OUT=$OUT/qwen3 run bash scripts/gpu_serve.sh
tar -czf $OUT/serve.tgz -C $OUT t smollm2 qwen3 && rm -rf $OUT/t $OUT/smollm2 $OUT/qwen3
