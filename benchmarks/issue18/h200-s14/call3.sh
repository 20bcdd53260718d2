#!/usr/bin/env bash
# Session 14, call 3: pytest tests/gpu after the prompt_capacities mend (call 2 stopped at the warm-start check), then
# the same server read by one client process (A) or four (B), paired runs at the half-peak rates, both models.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 200 python3 -m pytest -q tests/gpu
run timeout 130 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda --dummy-weights \
    --rate 42 --num-prompts 128 --one-server --bench-b "--client-procs 4" --order ABBAABBA --paired --seed 300 \
    --log-dir $OUT --out $OUT/ab_client2_smollm2-135m.json
run timeout 110 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/qwen3-0.6b --device cuda --dummy-weights \
    --rate 21.5 --num-prompts 128 --common=--skip-tokenizer-init --one-server --bench-b "--client-procs 4" \
    --order ABBA --paired --seed 300 --log-dir $OUT --out $OUT/ab_client_qwen3-0.6b.json
rm -f $OUT/ab_A.serve.log
echo "call3: exit status $status" | tee -a "$LOG"
