#!/usr/bin/env bash
# Session 26, call 4. 1. The API's key check on the event loop and prometheus_client imported at start (A, this
# tree) against the code of 648d22a (B, a copy in before/): SmolLM2 at 40 req/s, 8 paired runs ABBAABBA, fresh
# servers every 2 runs. 2. eager_metrics.py: /metrics' eager-step counter beside the trace's graph=false steps.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call4.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
mkdir -p $OUT/t && OUT=$OUT/t run timeout 60 python3 benchmarks/issue18/h200-s26/eager_metrics.py
gzip $OUT/t/trace_eager.json
run timeout 400 python3 benchmarks/ab_serve.py --model-path $PWD/benchmarks/configs/smollm2-135m --device cuda \
    --dummy-weights --rate 40 --num-prompts 128 --common "--max-total-tokens 1000000" \
    --a "" --b "" --pythonpath-b $PWD/benchmarks/issue18/h200-s26/before --order ABBAABBA --paired --restart-every 2 \
    --bench "--client-procs 4" --log-dir "$OUT/ab" --out "$OUT/ab_keycheck.json"
tar -czf $OUT/c4.tgz -C $OUT ab t && rm -rf $OUT/ab $OUT/t
echo "call4: exit status $status" | tee -a "$LOG"
