#!/usr/bin/env bash
# Session 15, call 2: early admission (the next step's admission made while step N's tokens travel; the default)
# against --no-early-admit, two servers on one H200, 6 paired runs of SmolLM2 at 42 req/s read by 4 client processes;
# a traced run of the default (tail.py); pytest tests/gpu.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
S=benchmarks/configs/smollm2-135m
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
run timeout 250 python3 benchmarks/ab_serve.py --model-path $S --device cuda --dummy-weights \
    --rate 42 --num-prompts 128 --common "--max-total-tokens 1000000" --b=--no-early-admit --bench "--client-procs 4" \
    --order ABBAABBAABBA --paired --seed 600 --log-dir $OUT --out $OUT/ab_admit_smollm2-135m.json
rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
LENS="--client-procs 4" N=128 run timeout 100 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py $S 42 $OUT
run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_smollm2-135m.json 2.8 --dump $OUT/tail_admit_smollm2.json
rm -f $OUT/trace_smollm2-135m.json $OUT/trace_server_smollm2-135m.log
run timeout 160 python3 -m pytest -q tests/gpu
echo "call2: exit status $status" | tee -a "$LOG"
