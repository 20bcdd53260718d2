#!/usr/bin/env bash
# Session 15, call 3: early admission on one machine, traced. `serve --trace` of SmolLM2 at 42 req/s (128 requests,
# seed 11, read by 4 client processes), the default and --no-early-admit alternated ABAB; tail.py on each; every
# garbage collection over 0.5 ms in the server's processes logged (MINISGL_GC_LOG_MS); the launch's own phases traced
# (MINISGL_TRACE_DETAIL, new) and summed by benchmarks/trace_phases.py (new). Then scripts/gpu_serve.sh at the target rate.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
S=benchmarks/configs/smollm2-135m
export MINISGL_GC_LOG_MS=0.5 MINISGL_TRACE_DETAIL=1
run python3 -c "import torch, os; print('torch', torch.__version__, 'commit', os.environ.get('MINISGL_COMMIT', '?'), torch.cuda.get_device_name())"
i=0
for variant in A B A B; do
  i=$((i+1))
  extra=""; [ $variant = B ] && extra="--no-early-admit"
  LENS="--client-procs 4" N=128 run timeout 100 python3 benchmarks/issue18/h200-s10/scripts/trace_serve.py $S 42 $OUT $extra
  run python3 benchmarks/issue18/h200-s11/tail.py $OUT/trace_smollm2-135m.json 2.8 --dump $OUT/tail_${i}${variant}.json
  run python3 benchmarks/trace_phases.py $OUT/trace_smollm2-135m.json
  grep -h "gc generation" $OUT/trace_server_smollm2-135m.log | tee -a $LOG | head -5
  echo "gc pauses over 0.5 ms: $(grep -c 'gc generation' $OUT/trace_server_smollm2-135m.log)" | tee -a $LOG
  mv $OUT/trace_bench_smollm2-135m.json $OUT/trace_bench_${i}${variant}.json
  rm -f $OUT/trace_smollm2-135m.json $OUT/trace_server_smollm2-135m.log
done
unset MINISGL_GC_LOG_MS MINISGL_TRACE_DETAIL
# (gpu_serve.sh left out: the device time left would not cover it)
echo "call3: exit status $status" | tee -a "$LOG"
