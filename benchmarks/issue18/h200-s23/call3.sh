#!/usr/bin/env bash
# Session 23, call 3: each hop of a step's replies (/metrics' minisgl:reply_hop_seconds: scheduler -> detokenizer,
# the detokenizer, detokenizer -> API), two SmolLM2 servers with paired loads: A the default, B --relay-spin-us 2000
# (the detokenizer polled 2 ms for the next step before it slept; measured at 783d8e3, then reverted: no gain).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
run timeout 330 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate ${CALL_RATE:-40} --num-prompts 128 --common "--max-total-tokens 1000000" \
    --a "" "--b=--relay-spin-us ${CALL_SPIN:-2000}" --order ${CALL_ORDER:-ABBAABBA} --paired --bench "--client-procs 4" \
    --log-dir "$OUT/ab" --out "$OUT/ab_spin.json"
tar -czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
echo "call3: exit status $status" | tee -a "$LOG"
