#!/usr/bin/env bash
# Session 24, call 6: a fourth paired batch at 40 req/s (A plain-socket replies, B ZMQ), now with each process's main
# thread's preemptions per second (bench's CPU report): are A's slower decode steps of call 4 a woken detokenizer
# taking the scheduler's core?
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call6.log
run timeout ${CALL_AB_LIMIT:-210} python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate 40 --num-prompts 128 --common "--max-total-tokens 1000000" --a "" "--b=--no-reply-socket" \
    --order ABBAABBA --paired --bench "--client-procs 4" --log-dir $OUT/ab --out $OUT/ab_wire_40.json 2>&1 | grep -v "capture CUDA"
tar -czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
