#!/usr/bin/env bash
# Session 38, call 3: call2.sh cut to what about 3 minutes of device time can hold (seven failed starts spent the
# rest): CUTLASS's swapped-operand GEMM at 64 and 256 rows, then skinny_gemm.cu's 4,1 against 1,1 in the graph step.
source benchmarks/issue16/call_env.sh
r timeout 90 python3 benchmarks/lt_probe.py --cutlass --pm 64,256 --json $OUT/cutlass.json
for v in "ga4,1 --skinny-ga 4,1" "ga1,1"; do
  r timeout 50 python3 benchmarks/profile_decode.py $v --bs 8,16 --json $OUT/profile.jsonl
done
echo call3 done >>$LOG
