#!/usr/bin/env bash
# Session 13: at the restored size-based mixed budget, 1) pytest tests/gpu; 2) a mixed step's device time by prompt
# length (whole prompts: the full budget) beside 16/32/64 decoding requests, both models, as JSON for chapter 9's
# figure; 3) SmolLM2 (no cap by its size) paired A/B against a 509-token cap; 4) P1 (issue 16) at the new default.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call_gpu.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 200 python3 -m pytest -q -x tests/gpu
for m in qwen3-0.6b smollm2-135m; do
  run timeout 100 python3 benchmarks/mixed_cost.py --model benchmarks/configs/$m --llm-kwargs mixed_prefill_tokens=16384 \
      --out $OUT/mixed_cost_$m.json
done
run timeout 200 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda --dummy-weights \
    --rate 42 --num-prompts 128 --common "--max-total-tokens 1000000" \
    --b="--mixed-prefill-tokens 509" --order ABBAABBA --paired --log-dir $OUT --out $OUT/ab_budget_smollm2-135m.json
rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
run timeout 120 python3 benchmarks/bench_gpu.py p1
echo "call_gpu: exit status $status" | tee -a "$LOG"
