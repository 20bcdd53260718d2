#!/usr/bin/env bash
# Session 14, call 5: early emission (serve --early-emit: step N's tokens leave from inside step N+1's launch) against
# the default, two servers on one H200, paired runs read by 4 client processes at the half-peak rates; pytest tests/gpu.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call5.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 170 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda --dummy-weights \
    --rate 42 --num-prompts 128 --common "--max-total-tokens 1000000" --b=--early-emit --bench "--client-procs 4" \
    --order ABBAABBA --paired --seed 500 --log-dir $OUT --out $OUT/ab_emit_smollm2-135m.json
rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
run timeout 120 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/qwen3-0.6b --device cuda --dummy-weights \
    --rate 21.5 --num-prompts 128 --common "--skip-tokenizer-init --max-total-tokens 400000" --b=--early-emit \
    --bench "--client-procs 4" --order ABBA --paired --seed 500 --log-dir $OUT --out $OUT/ab_emit_qwen3-0.6b.json
rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
run timeout 150 python3 -m pytest -q tests/gpu
echo "call5: exit status $status" | tee -a "$LOG"
