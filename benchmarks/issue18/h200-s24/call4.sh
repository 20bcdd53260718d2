#!/usr/bin/env bash
# Session 24, call 4 (run inline): a third paired batch at 40 req/s, B first (BAABBAAB): A the plain-socket replies, B ZMQ.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call4.log
run timeout 300 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda --dummy-weights \
    --rate 40 --num-prompts 128 --common "--max-total-tokens 1000000" --a "" "--b=--no-reply-socket" --order BAABBAAB \
    --paired --bench "--client-procs 4" --log-dir $OUT/ab --out $OUT/ab_wire_40.json 2>&1 | grep -v "capture CUDA"
tar -czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
