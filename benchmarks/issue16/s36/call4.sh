#!/usr/bin/env bash
# Session 36, call 4: skinny_gemm.cu's variants (x copied in G groups so the mmas start on the first while the rest
# land; A accumulator chains, not one) beside the model's shape: correct (the GPU test over every variant), alone
# (lt_probe.py --skinny-kinds n,p at 2-64 rows) and inside the model (profile_decode.py --skinny-ga, graph step at
# 2, 8, 16 requests, against the model's shape 1,1 and cuBLAS).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 90 python3 -m pytest -q tests/gpu/test_fused.py -k skinny -p no:cacheprovider -rfs
r timeout 45 python3 benchmarks/lt_probe.py --skinny --sm 2,16,32,64 --skinny-kinds n,p --json $OUT/skinny.json
for ga in 1,1 1,4 4,2 1,2; do  # the likeliest first: what is left of the device time may end the call
  r timeout 30 python3 benchmarks/profile_decode.py ga$ga --skinny-ga $ga --bs 2,8,16 --json $OUT/profile.jsonl
done
r timeout 30 python3 benchmarks/profile_decode.py skinny_off --no-skinny-gemm --bs 2,8,16 --json $OUT/profile.jsonl
echo done >>$LOG
