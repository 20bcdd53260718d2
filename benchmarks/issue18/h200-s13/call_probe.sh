#!/usr/bin/env bash
# Session 13, issue 18: what a mixed step costs by prompt size, and what the served tail is made of with a small
# mixed budget. 1) One mixed step beside 32 decoding requests by prompt length (synchronized, the normal loop) and
# the kernels of one with a 945-token prompt. 2) Step traces of Qwen3 served at 21.5 req/s (128 requests): the
# defaults, then --mixed-prefill-tokens 509 --mixed-backlog-tokens 4096 (session 12's reverted default), tail.py on each.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call_probe.log
Q=benchmarks/configs/qwen3-0.6b
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 200 python3 benchmarks/prefill_step.py --model $Q --device cuda --lens 128,256,509,765,945,1021 --reps 5 \
    --decode-bs 32 --profile 945
for variant in full b509; do
  case $variant in full) extra="" ;; b509) extra="--mixed-prefill-tokens 509 --mixed-backlog-tokens 4096" ;; esac
  N=128 run timeout 150 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py $Q 21.5 $OUT --max-total-tokens 400000 $extra
  mv $OUT/trace_bench_qwen3-0.6b.json $OUT/trace_bench_qwen3_$variant.json
  run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_qwen3-0.6b.json 2.8 --dump $OUT/tail_qwen3_$variant.json
  gzip -c $OUT/trace_qwen3-0.6b.json > $OUT/trace_qwen3_$variant.json.gz; rm -f $OUT/trace_qwen3-0.6b.json
  python3 -c "
import json; s = json.load(open('$OUT/trace_bench_qwen3_$variant.json')); s = s.get('results', s)
print('$variant client ITL p50/p90/p99', s['itl_ms']['median'], s['itl_ms']['p90'], s['itl_ms']['p99'], 'step median', s.get('step_median_ms'))" | tee -a $LOG
  rm -f $OUT/trace_server_qwen3-0.6b.log
done
echo "call_probe: exit status $status" | tee -a "$LOG"
