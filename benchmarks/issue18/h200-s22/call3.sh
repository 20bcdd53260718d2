#!/usr/bin/env bash
# Session 22, call 3: where SmolLM2's ~0.45 ms between the step p99 and the client's ITL p99 comes from.
# Two servers, paired loads (ab_serve.py): A the default (text out: detokenizer), B --skip-tokenizer-init (ids out,
# no detokenizing), at the target rate (46 req/s) and at Qwen3's (23 req/s), timed by arrival (kernel stamps).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
for rate in ${CALL_RATES:-46 23}; do
    run timeout 260 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda \
        --dummy-weights --rate "$rate" --num-prompts 128 --common "--max-total-tokens 1000000" \
        --a "" "--b=--skip-tokenizer-init" --order ${CALL_ORDER:-ABBAABBA} --paired --bench "--client-procs 4" \
        --log-dir "$OUT" --out "$OUT/ab_skip_$rate.json"
done
echo "call3: exit status $status" | tee -a "$LOG"
