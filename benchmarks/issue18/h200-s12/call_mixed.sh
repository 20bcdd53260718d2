#!/usr/bin/env bash
# Session 12, issue 18: the default mixed budget by the model's size (Qwen3-0.6B: 509 tokens, the queue rule at 4096)
# against the full budget (the old default, --mixed-prefill-tokens 16384), both servers up on one H200, at the half-peak
# rate; then serve against offline LLM.generate with all 256 requests at once (the throughput target); then tests/gpu.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call_mixed.log
run timeout 230 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/qwen3-0.6b --device cuda --dummy-weights \
    --rate 21.5 --num-prompts 128 --common "--skip-tokenizer-init --max-total-tokens 400000" \
    --b="--mixed-prefill-tokens 16384" --order ABBAAB --log-dir $OUT --out $OUT/ab_mixed_qwen3-0.6b.json
rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
run timeout 170 python3 -m minisgl_edu.bench compare --model-path benchmarks/configs/qwen3-0.6b --device cuda --dummy-weights \
    --num-prompts 256 --warmup 8 --repeats 1 "--serve-args=--skip-tokenizer-init" --no-progress \
    --server-log $OUT/compare_qwen3.serve.log --out $OUT/compare_qwen3-0.6b.json
rm -f $OUT/compare_qwen3.serve.log
run timeout 170 python3 -m pytest -q -x tests/gpu
echo "call_mixed: exit status $status" | tee -a "$LOG"
