#!/usr/bin/env bash
# Session 12, issue 18: the API server with uvicorn's httptools parser (now a dependency and in the bundle) against
# h11 (what the H200 ran until now), both servers up on one H200, ABBA at the half-peak rates; then a step trace of
# the defaults at the same rate per model, its emit intervals (tail.py) beside the client's ITL of the same run.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call_http.log
run python3 -c "import torch, os, importlib.util as u; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), 'httptools', bool(u.find_spec('httptools')), 'uvloop', bool(u.find_spec('uvloop')))"
for m in ${MODELS:-qwen3-0.6b smollm2-135m}; do
  case $m in
    qwen3-0.6b) rate=21.5; common="--skip-tokenizer-init --max-total-tokens 400000" ;;
    smollm2-135m) rate=42; common="--max-total-tokens 1000000" ;;
  esac
  run timeout 200 python3 benchmarks/ab_serve.py --model-path benchmarks/configs/$m --device cuda --dummy-weights \
      --rate $rate --num-prompts 128 --common "$common" --b="--http-parser h11" --order ABBA --log-dir $OUT \
      --out $OUT/ab_http_$m.json
  rm -f $OUT/ab_A.serve.log $OUT/ab_B.serve.log
done
for m in ${TRACE_MODELS:-qwen3-0.6b smollm2-135m}; do
  case $m in qwen3-0.6b) rate=21.5 ;; smollm2-135m) rate=42 ;; esac
  N=128 run timeout 120 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py benchmarks/configs/$m $rate $OUT
  run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_$m.json 2.8
  python3 -c "
import json; s = json.load(open('$OUT/trace_bench_$m.json')); s = s.get('results', s)
print('$m client ITL p50/p90/p99', s['itl_ms']['median'], s['itl_ms']['p90'], s['itl_ms']['p99'])" | tee -a $LOG
  rm -f $OUT/trace_$m.json $OUT/trace_server_$m.log
done
echo "call_http: exit status $status" | tee -a "$LOG"
