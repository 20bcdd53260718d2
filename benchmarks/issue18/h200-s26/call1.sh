#!/usr/bin/env bash
# Session 26, call 1: session 25's unrun changes on the H200. 1. pytest tests/gpu (the lanes rule, Batch.in_graph).
# 2. probe.py: traced served loads (seeds 101, 100; run 0 with a hop log), /metrics' eager-step counter after the
# warm-up and after the load. 3. gpu_serve.sh: SmolLM2 at the target rate three times.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run timeout 200 python3 -m pytest tests/gpu -q -p no:cacheprovider
mkdir -p $OUT/t && OUT=$OUT/t run timeout 150 python3 benchmarks/issue18/h200-s26/probe.py --seeds 101,100 --hop-log 0
gzip $OUT/t/trace_*.json $OUT/t/hops_*.jsonl
GPU_SERVE_MODELS=smollm2-135m GPU_SERVE_RATES=0.5x,0.5x,0.5x GPU_SERVE_LIMIT=200 OUT=$OUT/smollm2 run bash scripts/gpu_serve.sh
tar -czf $OUT/c1.tgz -C $OUT t smollm2 && rm -rf $OUT/t $OUT/smollm2
