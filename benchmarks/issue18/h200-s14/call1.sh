#!/usr/bin/env bash
# Session 14, call 1. Issue 16: the layer's products at 16..256 rows, cuBLAS against split-K by hand (bench_gpu.py
# splitk). Issue 18: the bench client's own ITL error on the H200 host (client_jitter.py: one loop, 2 and 4 client
# processes), then one server per model with the same paired load read by one client process (A) and by four (B).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name(), os.cpu_count(), 'cpus')"
run timeout 150 python3 benchmarks/bench_gpu.py splitk
python3 -c "import json; r=[x for x in json.load(open('benchmarks/results.json')) if x['metric'].startswith('splitk_')]; json.dump(r, open('$OUT/splitk_rows.json','w'), indent=1)"
run timeout 100 python3 benchmarks/client_jitter.py --streams 40 --interval-ms 1.4 --tokens 300 --repeats 3 \
    --client-procs 1 2 4 --out $OUT/client_jitter.json
run timeout 200 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/smollm2-135m --device cuda --dummy-weights \
    --rate 42 --num-prompts 128 --one-server --bench-b "--client-procs 4" --order ABBAABBA --paired \
    --log-dir $OUT --out $OUT/ab_client_smollm2-135m.json
run timeout 150 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/qwen3-0.6b --device cuda --dummy-weights \
    --rate 21.5 --num-prompts 128 --common=--skip-tokenizer-init --one-server --bench-b "--client-procs 4" \
    --order ABBA --paired --log-dir $OUT --out $OUT/ab_client_qwen3-0.6b.json
rm -f $OUT/ab_A.serve.log
echo "call1: exit status $status" | tee -a "$LOG"
