#!/usr/bin/env bash
# Not run in session 35 (no machine); session 36 ran it as its call 2 at a5ef452, with skinny_default_and_swap.patch applied.
# Session 35, call 2: skinny_gemm on by default, its launch made once a shape (_SkinnyPlan): the whole GPU test suite
# with it on, batch 2/8/16 on and off (graph and eager step, alternating), the probe of skinny_t (the operands swapped)
# at 16-128 rows beside skinny and cuBLAS, and on an H200 P1 and P2 at this commit. With little device time left:
# RUNS=1 (one on/off pair) and SKINNY_SM=16,32,64 (a shorter probe).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 240 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
for i in $(seq ${RUNS:-2}); do
  r timeout 45 python3 benchmarks/profile_decode.py skinny_on --bs 2,8,16 --json $OUT/profile.jsonl
  r timeout 45 python3 benchmarks/profile_decode.py skinny_off --no-skinny-gemm --bs 2,8,16 --json $OUT/profile.jsonl
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 200 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
r timeout 240 python3 benchmarks/lt_probe.py --skinny --sm ${SKINNY_SM:-16,32,64,128} --json $OUT/skinny.json
echo done >>$LOG
