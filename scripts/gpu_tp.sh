#!/usr/bin/env bash
# Chapter 8 on two (or four) H200s: tp=1 vs tp=N logits (Qwen3-0.6B architecture, dummy weights, bf16)
# and the offline throughput at each tp size. Each size runs in its own process (the GPUs start empty).
#   bash scripts/gpu_tp.sh [N ...]        (default: 2)     results: $OUT/tp/tp*.pt, $OUT/gpu_tp.log
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
mkdir -p "$OUT/tp"
SIZES=${*:-2}
LOG=$OUT/gpu_tp.log
run nvidia-smi --query-gpu=name,memory.total --format=csv
run python3 scripts/gpu_tp.py run --tp 1 --out "$OUT/tp" --requests "${REQUESTS:-256}"
for n in $SIZES; do
    run python3 scripts/gpu_tp.py run --tp "$n" --out "$OUT/tp" --requests "${REQUESTS:-256}"
    run python3 scripts/gpu_tp.py compare "$OUT/tp/tp1.pt" "$OUT/tp/tp$n.pt"
done
echo "gpu_tp: exit status $status" | tee -a "$LOG"
exit $status
