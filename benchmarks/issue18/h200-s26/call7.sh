#!/usr/bin/env bash
# Session 26, call 7: gpu_serve's first rate run stalled the detokenizer 50-85 ms at a time (calls 1 and 6: the seed
# of bench compare's first sweep run, 1000, at 46.98 req/s). That seed's load, paired: A this tree (let_go tries a
# few cuts), B the code of 21c06e2 (a copy in before/: let_go scans every cut).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call7.log
run timeout 200 python3 benchmarks/ab_serve.py --model-path $PWD/benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate 46.98 --num-prompts 128 --common "--max-total-tokens 1000000" --seed 1000 \
    --a "" --b "" --pythonpath-b $PWD/benchmarks/issue18/h200-s26/before --order AB --paired \
    --bench "--client-procs 4" --log-dir "$OUT/ab" --out "$OUT/ab_letgo.json"
