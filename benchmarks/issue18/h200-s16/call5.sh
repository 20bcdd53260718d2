#!/usr/bin/env bash
# Session 16, call 5: the young-generation threshold. Two servers, the default (--gc-threshold 10000, new) and
# --gc-threshold 700 (Python's own, as before), SmolLM2 at 42 req/s, paired runs ABBAABBA read by 4 client
# processes, every collection over 0.3 ms logged (MINISGL_GC_LOG_MS). Then scripts/gpu_serve.sh at the target rate
# with this commit's defaults (early admission now off by default).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call5.log
S=benchmarks/configs/smollm2-135m
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
export MINISGL_GC_LOG_MS=0.3
run timeout 175 python3 benchmarks/ab_serve.py --model-path $S --device cuda --dummy-weights \
    --rate 42 --num-prompts 128 --common "--max-total-tokens 1000000" --b="--gc-threshold 700" --bench "--client-procs 4" \
    --order ABBAABBA --paired --seed 900 --log-dir $OUT --out $OUT/ab_gc_smollm2-135m.json
for v in A B; do
  echo "server $v: collections over 0.3 ms: $(grep -c 'gc generation' $OUT/ab_$v.serve.log)" | tee -a $LOG
  grep -h "gc generation" $OUT/ab_$v.serve.log | awk '{k=$4" gen "$7; n[k]++; s[k]+=$9; if ($9>m[k]) m[k]=$9} END {for (k in n) printf "  %s: %d, %.1f ms in all, longest %.1f ms\n", k, n[k], s[k], m[k]}' | tee -a $LOG
done
unset MINISGL_GC_LOG_MS
GPU_SERVE_RATES=0.5x GPU_SERVE_LIMIT=140 bash scripts/gpu_serve.sh  # the targets' protocol, this commit
echo "call5: exit status $status" | tee -a "$LOG"
