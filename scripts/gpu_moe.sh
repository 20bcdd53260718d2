#!/usr/bin/env bash
# Chapter 10 on one H200 (issue 17): (a) the grouped MoE path vs the reference within the bf16 tolerance
# on a small config; (b) the Qwen3-30B-A3B architecture with dummy weights (~61 GB bf16, experts drawn on
# the device) on the anchors' offline workload: tok/s and its memory floor. About 5 minutes.
#   bash scripts/gpu_moe.sh [check] [bench]      (default: both)    results: $OUT/moe_check.json, moe_bench.json, gpu_moe.log
# CPU dry run of the same commands: DEVICE=cpu CONFIG=<tiny qwen3_moe dir, vocab > 10000> REQUESTS=4 bash scripts/gpu_moe.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
STAGES=${*:-check bench}
DEVICE=${DEVICE:-cuda} CONFIG=${CONFIG:-benchmarks/configs/qwen3-30b-a3b} REQUESTS=${REQUESTS:-256}
LOG=$OUT/gpu_moe.log
run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run python3 -c "import torch, torch.nn.functional as F; print('torch', torch.__version__, 'grouped_mm:', hasattr(F, 'grouped_mm') or hasattr(torch, '_grouped_mm'), 'commit', '${MINISGL_COMMIT:-?}')"
for stage in $STAGES; do case $stage in
check) run timeout 120 python3 scripts/gpu_moe.py check --device "$DEVICE" ;;
bench) run timeout 360 python3 scripts/gpu_moe.py bench --device "$DEVICE" --config "$CONFIG" --requests "$REQUESTS" ;;
esac; done
echo "gpu_moe: exit status $status" | tee -a "$LOG"
exit $status
