#!/usr/bin/env bash
# Session 25, call 1: would a prompt's prefill on a second stream beside the decode steps keep the ITL tail near one
# step? side_prefill_probe.py for both models (decode rows at context 800; prompts of 253-1,021 tokens).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run timeout 200 python3 benchmarks/side_prefill_probe.py --model benchmarks/configs/smollm2-135m --decode-bs 16,32,64 \
    --lens 253,509,765,1021 --json $OUT/probe_smollm2.json
run timeout 200 python3 benchmarks/side_prefill_probe.py --model benchmarks/configs/qwen3-0.6b --decode-bs 16,32,64 \
    --lens 253,509,1021 --json $OUT/probe_qwen3.json
echo "call1: exit status $status" | tee -a "$LOG"
