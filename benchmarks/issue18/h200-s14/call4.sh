#!/usr/bin/env bash
# Session 14, call 4: where SmolLM2's tail lies once the client is four processes. `serve --trace` at 42 req/s
# (128 requests, seed 11), read by one client process and then by four; tail.py gives the token-weighted interval at
# the scheduler's emission beside the client's ITL p99 of the same run.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call4.log
S=benchmarks/configs/smollm2-135m
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
for procs in 1 4; do
  LENS="--client-procs $procs" N=128 run timeout 120 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py $S 42 $OUT
  mv $OUT/trace_bench_smollm2-135m.json $OUT/trace_bench_smollm2_c$procs.json
  run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_smollm2-135m.json 2.8 --dump $OUT/tail_smollm2_c$procs.json
  rm -f $OUT/trace_smollm2-135m.json $OUT/trace_server_smollm2-135m.log
  python3 -c "
import json; s = json.load(open('$OUT/trace_bench_smollm2_c$procs.json')); s = s.get('results', s)
print('client procs $procs: client ITL p50/p90/p99', s['itl_ms']['median'], s['itl_ms']['p90'], s['itl_ms']['p99'])" | tee -a $LOG
done
echo "call4: exit status $status" | tee -a "$LOG"
