#!/usr/bin/env bash
# Session 26, call 3 (call 2 only carried .gpu/whl_nb). Call 1's hop log put seed 101's late pair in the API process:
# it stopped reading replies for ~35 ms as they arrived. 1. probe.py seeds 101, 100 with every process logging its
# collections over 2 ms. 2. seed 101 again, py-spy on the API process. 3. /metrics' eager-step counter where decode
# steps must run eagerly (--cuda-graph-max-bs 16). 4. notebook 06 (its trace cell now shows `graph`). 5. gpu_serve.sh:
# Qwen3 at the target rate twice (the lanes rule).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call3.log
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', open('.gpu/COMMIT').read().strip(), torch.cuda.get_device_name(), os.cpu_count(), 'CPUs')"
mkdir -p $OUT/t
MINISGL_GC_LOG_MS=2 OUT=$OUT/t run timeout 110 python3 benchmarks/issue18/h200-s26/probe.py --seeds 101,100 --tag _gc --hop-log 0
grep -h "gc generation" $OUT/t/serve_gc_*.log | tee -a $LOG | head -40
MINISGL_GC_LOG_MS=2 OUT=$OUT/t run timeout 80 python3 benchmarks/issue18/h200-s26/probe.py --seeds 101 --tag _spy --spy 0 --hop-log 0
grep -h "gc generation" $OUT/t/serve_spy_*.log | tee -a $LOG | head -20; cat $OUT/t/spy_spy_0.log | tail -5
OUT=$OUT/t run timeout 70 python3 benchmarks/issue18/h200-s26/probe.py --seeds 100 --tag _bs16 --serve-args "--cuda-graph-max-bs 16"
gzip $OUT/t/trace_*.json $OUT/t/hops_*.jsonl $OUT/t/spy_*.json
python3 -m ipykernel install --user >/dev/null 2>&1
run timeout 150 python3 scripts/run_notebooks.py $OUT/nb notebooks/06_overlap.ipynb
GPU_SERVE_MODELS=qwen3-0.6b GPU_SERVE_RATES=0.5x,0.5x GPU_SERVE_LIMIT=170 OUT=$OUT/qwen3 run bash scripts/gpu_serve.sh
tar -czf $OUT/c3.tgz -C $OUT t qwen3 nb && rm -rf $OUT/t $OUT/qwen3 $OUT/nb
