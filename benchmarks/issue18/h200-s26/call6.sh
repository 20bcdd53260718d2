#!/usr/bin/env bash
# Session 26, call 6: SmolLM2 at the target rate twice at HEAD (the async key check, prometheus_client imported at
# start), every server process logging its collections over 5 ms: does a stall like call 1's come back, and is it
# the collector's?
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call6.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
MINISGL_GC_LOG_MS=5 GPU_SERVE_MODELS=smollm2-135m GPU_SERVE_RATES=0.5x,0.5x GPU_SERVE_LIMIT=150 OUT=$OUT/smollm2 run bash scripts/gpu_serve.sh
grep -h "gc generation" $OUT/smollm2/serve_*.log | tee -a $LOG
rm -f $OUT/smollm2/gpu_serve.tgz
