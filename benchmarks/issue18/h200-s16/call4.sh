#!/usr/bin/env bash
# Session 16, call 4: did early admission cost the all-at-once throughput (serve / offline read 0.909 for SmolLM2 in
# call 3 at 84b06d2, 0.975 in session 14)? Two servers, the default and --no-early-admit, 256 requests at once, paired
# runs ABBAABBA. Then the same two at 42 req/s (ABBAABBA, paired), untraced, every collection over 0.3 ms logged by
# both servers' processes (MINISGL_GC_LOG_MS): does the garbage collector stall an untraced server?
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call4.log
S=benchmarks/configs/smollm2-135m
export MINISGL_GC_LOG_MS=0.3
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 220 python3 benchmarks/ab_serve.py --model-path $S --device cuda --dummy-weights \
    --rate inf --num-prompts 256 --common "--max-total-tokens 1000000" --b=--no-early-admit --bench "--client-procs 4" \
    --order ABBAABBA --paired --seed 800 --log-dir $OUT --out $OUT/ab_admit_burst_smollm2-135m.json
for v in A B; do
  echo "burst server $v: gc pauses over 0.3 ms: $(grep -c 'gc generation' $OUT/ab_$v.serve.log)" | tee -a $LOG
  grep -h "gc generation" $OUT/ab_$v.serve.log | awk '{k=$4" gen "$7; n[k]++; s[k]+=$9; if ($9>m[k]) m[k]=$9} END {for (k in n) printf "  %s: %d, %.1f ms in all, longest %.1f ms\n", k, n[k], s[k], m[k]}' | tee -a $LOG
  mv $OUT/ab_$v.serve.log $OUT/burst_$v.serve.log
done
run timeout 220 python3 benchmarks/ab_serve.py --model-path $S --device cuda --dummy-weights \
    --rate 42 --num-prompts 128 --common "--max-total-tokens 1000000" --b=--no-early-admit --bench "--client-procs 4" \
    --order ABBAABBA --paired --seed 700 --log-dir $OUT --out $OUT/ab_admit_rate_smollm2-135m.json
for v in A B; do
  echo "42 req/s server $v: gc pauses over 0.3 ms: $(grep -c 'gc generation' $OUT/ab_$v.serve.log)" | tee -a $LOG
  grep -h "gc generation" $OUT/ab_$v.serve.log | awk '{k=$4" gen "$7; n[k]++; s[k]+=$9; if ($9>m[k]) m[k]=$9} END {for (k in n) printf "  %s: %d, %.1f ms in all, longest %.1f ms\n", k, n[k], s[k], m[k]}' | tee -a $LOG
done
echo "call4: exit status $status" | tee -a "$LOG"
