#!/usr/bin/env bash
# Session 17, call 3: LEAN_PLAN (a graph's wrapper re-planned by FlashInfer's host planner alone). `pytest tests/gpu`
# (the new lean == plan() test among them); launch_phases.py --busy-ms 4 (the default, the plan() twin, the gather
# twin; GPU idle, then busy); then two servers, the code before the change (.gpu/base: `git archive 16c981a
# minisgl_edu`) as A and this commit as B, SmolLM2 at 42 req/s, 128 requests a run, paired ABBAABBA, 4 client processes.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
S=benchmarks/configs/smollm2-135m
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 200 python3 -m pytest -q tests/gpu
run timeout 150 python3 benchmarks/launch_phases.py --busy-ms 4
run timeout 200 python3 benchmarks/ab_serve.py --model-path $S --device cuda --dummy-weights --rate 42 --num-prompts 128 \
    --common "--max-total-tokens 1000000" --pythonpath-a $PWD/.gpu/base --b "" --bench "--client-procs 4" \
    --order ABBAABBA --paired --seed 1000 --log-dir $OUT --out $OUT/ab_lean_smollm2-135m.json
echo "call3: exit status $status" | tee -a "$LOG"
