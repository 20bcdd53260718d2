#!/usr/bin/env bash
# Session 12, issue 18: reading the mail while a step's tokens travel (early receive, the default) against the loop
# that reads it at the top only (--no-early-receive), both servers up on one H200, ABBA at the half-peak rates of
# sessions 10-11. Then, time allowing, the GPU tests.
#   bash benchmarks/issue18/h200-s12/call_ab.sh [models...]
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call_ab.log
run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), 'cpus', os.cpu_count())"
for m in ${@:-qwen3-0.6b smollm2-135m}; do
  case $m in
    qwen3-0.6b) rate=21.5; common="--skip-tokenizer-init --max-total-tokens 400000" ;;
    smollm2-135m) rate=42; common="--max-total-tokens 1000000" ;;
  esac
  run timeout 200 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/$m --device cuda --dummy-weights \
      --rate $rate --num-prompts 128 --common "$common" --b=--no-early-receive --order ABBA --log-dir $OUT \
      --out $OUT/ab_early_$m.json
  tail -30 $OUT/ab_A.serve.log > $OUT/ab_early_${m}_A.serve.tail; tail -30 $OUT/ab_B.serve.log > $OUT/ab_early_${m}_B.serve.tail
  rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
done
[ "${WITH_TESTS:-0}" = 1 ] && run timeout 240 python3 -m pytest -q -x tests/gpu
echo "call_ab: exit status $status" | tee -a "$LOG"
