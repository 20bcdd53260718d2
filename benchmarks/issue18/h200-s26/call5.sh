#!/usr/bin/env bash
# Session 26, call 5: Qwen3 at the target rate twice again, on another machine: call 3's runs read ITL p99 / step
# 2.43 and 2.55 while the scheduler's own emission p99 / step stayed where session 25 had it (1.93, 1.96); their hops
# after the scheduler were 4-5x session 25's at p99.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call5.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run uptime
GPU_SERVE_MODELS=qwen3-0.6b GPU_SERVE_RATES=0.5x,0.5x GPU_SERVE_LIMIT=175 OUT=$OUT/qwen3 run bash scripts/gpu_serve.sh
rm -f $OUT/qwen3/gpu_serve.tgz
