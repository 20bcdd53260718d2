#!/usr/bin/env bash
# Chapter 8 on two (or four) H200s: tp=1 vs tp=N logits (Qwen3-0.6B architecture, dummy weights, bf16)
# and the offline throughput at each tp size. Each size runs in its own process (the GPUs start empty).
#   bash scripts/gpu_tp.sh [N ...]        (default: 2)     results: $OUT/tp/tp*.pt, $OUT/gpu_tp.log
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/tp"
SIZES=${*:-2}
export PYTHONUNBUFFERED=1 FLASHINFER_DISABLE_JIT=${FLASHINFER_DISABLE_JIT:-1} NCCL_NVLS_ENABLE=0
export PYTHONPATH=${PYTHONPATH:-}:$PWD
if ! python3 -c "import flashinfer" 2>/dev/null && [ -d .gpu/whl ]; then  # as in gpu_suite.sh
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
    export PYTHONPATH=/tmp/site:$PYTHONPATH
    mkdir -p /tmp/site/flashinfer/data/aot && cp -r .gpu/fi_aot/. /tmp/site/flashinfer/data/aot/ 2>/dev/null
fi
LOG=$OUT/gpu_tp.log
status=0
run() { echo "=== $* ($(date -u +%T))" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; local rc=${PIPESTATUS[0]}; [ $rc -ne 0 ] && status=$rc; echo "=== rc=$rc" | tee -a "$LOG"; }
run nvidia-smi --query-gpu=name,memory.total --format=csv
run python3 scripts/gpu_tp.py run --tp 1 --out "$OUT/tp" --requests "${REQUESTS:-256}"
for n in $SIZES; do
    run python3 scripts/gpu_tp.py run --tp "$n" --out "$OUT/tp" --requests "${REQUESTS:-256}"
    run python3 scripts/gpu_tp.py compare "$OUT/tp/tp1.pt" "$OUT/tp/tp$n.pt"
done
echo "gpu_tp: exit status $status" | tee -a "$LOG"
exit $status
