#!/usr/bin/env bash
# Session 17, call 6: two more pairs of call 3 and 5's A/B on this machine (call 4's gpu_serve.sh read SmolLM2's ITL p99 / step at 3.10,
# its worst so far): the code before LEAN_PLAN (.gpu/base = 16c981a) as A, this commit as B, SmolLM2 at 42 req/s,
# 128 requests a run, paired ABBAABBA (other seeds), 4 client processes.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call6.log
S=benchmarks/configs/smollm2-135m
run timeout 200 python3 benchmarks/ab_serve.py --model-path $S --device cuda --dummy-weights --rate 42 --num-prompts 128 \
    --common "--max-total-tokens 1000000" --pythonpath-a $PWD/.gpu/base --b "" --bench "--client-procs 4" \
    --order ABBA --paired --seed 3000 --log-dir $OUT --out $OUT/ab_lean3_smollm2-135m.json
echo "call6: exit status $status" | tee -a "$LOG"
