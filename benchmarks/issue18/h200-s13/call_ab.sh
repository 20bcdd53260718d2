#!/usr/bin/env bash
# Session 13, issue 18: the size-based mixed budget restored as the CUDA default (Qwen3-0.6B: 509 tokens, the queue
# rule at 4096) against the full budget (--mixed-prefill-tokens 16384, the default until now), both servers up on one
# H200, 12 paired runs (ABBA x 3, each pair on the same prompts and arrivals) at the half-peak rate; then serve
# against offline LLM.generate with all 256 requests at once (the throughput target) at the new default.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call_ab.log
Q=benchmarks/configs/qwen3-0.6b
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 330 python3 benchmarks/ab_serve.py --model-path $Q --device cuda --dummy-weights \
    --rate 21.5 --num-prompts 128 --common "--skip-tokenizer-init --max-total-tokens 400000" \
    --b="--mixed-prefill-tokens 16384" --order ABBAABBAABBA --paired --log-dir $OUT --out $OUT/ab_budget_qwen3-0.6b.json
grep -h "mixed budget\|mixed_prefill" $OUT/ab_A.serve.log | head -3 | tee -a $LOG
rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
run timeout 200 python3 -m minisgl_edu.bench compare --model-path $Q --device cuda --dummy-weights \
    --num-prompts 256 --warmup 8 --repeats 1 "--serve-args=--skip-tokenizer-init" --no-progress \
    --server-log $OUT/compare_qwen3.serve.log --out $OUT/compare_qwen3-0.6b.json
rm -f $OUT/compare_qwen3.serve.log
echo "call_ab: exit status $status" | tee -a "$LOG"
