#!/usr/bin/env bash
# Session 13, issue 18: a mixed step's device time by prompt length beside 16/32/64 decoding requests (mixed_cost.py),
# both models; then served step traces at the half-peak rates with smaller mixed budgets (tail.py on each).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call_cost.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
for m in qwen3-0.6b smollm2-135m; do
  run timeout 150 python3 benchmarks/mixed_cost.py --model benchmarks/configs/$m
done
for spec in "qwen3-0.6b 21.5 b253" "smollm2-135m 42 full" "smollm2-135m 42 b509" "smollm2-135m 42 b253"; do
  set -- $spec; m=$1; rate=$2; variant=$3
  case $variant in full) extra="" ;; b509) extra="--mixed-prefill-tokens 509 --mixed-backlog-tokens 4096" ;;
                   b253) extra="--mixed-prefill-tokens 253 --mixed-backlog-tokens 4096" ;; esac
  case $m in qwen3-0.6b) cap=400000 ;; *) cap=1000000 ;; esac
  N=128 run timeout 150 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py benchmarks/configs/$m $rate $OUT --max-total-tokens $cap $extra
  mv $OUT/trace_bench_$m.json $OUT/trace_bench_${m}_$variant.json
  run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_$m.json 2.8 --dump $OUT/tail_${m}_$variant.json
  rm -f $OUT/trace_$m.json $OUT/trace_server_$m.log
  python3 -c "
import json; s = json.load(open('$OUT/trace_bench_${m}_$variant.json')); s = s.get('results', s)
print('$m $variant client ITL p50/p90/p99', s['itl_ms']['median'], s['itl_ms']['p90'], s['itl_ms']['p99'], {k: v for k, v in s.items() if 'step' in k})" | tee -a $LOG
done
echo "call_cost: exit status $status" | tee -a "$LOG"
