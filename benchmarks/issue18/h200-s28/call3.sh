#!/usr/bin/env bash
# Session 28, call 3. Call 2 (gpu_serve.sh at 544fce8) read the reply hops' p99 at 2.2-2.6 ms at every rate for both
# models (session 26's call 6, 21c06e2, read 0.3-0.9 ms in its second rate run on another machine), so ITL p99 was
# 2.8-3.1x the median decode step. Code or host? A (this tree) against B (21c06e2's minisgl_edu, a copy in before/):
# SmolLM2 at call 2's half-peak rate, 8 paired runs ABBAABBA, fresh servers every 2 runs, on one machine.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
run uptime
run timeout 420 python3 benchmarks/ab_serve.py --model-path $PWD/benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate 44 --num-prompts 128 --common "--max-total-tokens 1000000" \
    --a "" --b "" --pythonpath-b $PWD/benchmarks/issue18/h200-s28/before --order ABBAABBA --paired --restart-every 2 \
    --bench "--client-procs 4" --log-dir "$OUT/ab" --out "$OUT/ab_hops.json"
grep -h "waited .* ms in hop\|one wake took\|gc generation" $OUT/ab/*.log | head -20 | tee -a $LOG
tar -czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
echo "call3: exit status $status" | tee -a "$LOG"
