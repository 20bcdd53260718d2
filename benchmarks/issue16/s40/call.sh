#!/usr/bin/env bash
# Session 40's next call (for the next session; about 7 minutes): graphs.gc_paused (the cycle collector paused while
# a GraphRunner captures) has not run on a GPU. Its failure was rare (once in two runs of the same tests), so
# tests/gpu runs whole twice; then, on an H200, issue 16's targets at this commit (the H200 last ran the engine at
# 5e7239a, before the skinny GEMM became the default). Prepare .gpu with ../shared/device/bundle.sh,
# scripts/gpu_bundle_extra.sh (or move the notebooks' wheels to .gpu/whl_nb: the carry must stay under 64 MiB) and
# bash scripts/build_fi_extra_kernels.sh; git rev-parse --short HEAD > .gpu/COMMIT; carry .gpu/whl, .gpu/fi_aot,
# .gpu/kernels, .gpu/COMMIT.   bash benchmarks/issue16/s40/call.sh
source benchmarks/issue16/call_env.sh
for run in 1 2; do
  r timeout 200 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
done
grep -c "function reset" $LOG >>$LOG  # 0: no graph was destroyed while one was being captured
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 150 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
echo "call done" >>$LOG
