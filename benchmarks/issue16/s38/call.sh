#!/usr/bin/env bash
# Session 38's calls (sessions 38 and 39 found no machine; call 1 ran in session 40 on an H100, see
# benchmarks/issue16/s40/call1; session 40's call 2 ran all of tests/gpu instead of this call 2), each under 10
# minutes; carry .gpu/whl, .gpu/fi_aot, .gpu/kernels (with cutlass_swap_ab.so and cutlass_swap_ab_pf.so from
# CUTLASS=1 ONLY_CUBIN=1 bash scripts/build_fi_extra_kernels.sh) and .gpu/COMMIT.
# After ../shared/device/bundle.sh run scripts/gpu_bundle_extra.sh too: it moves the notebooks' wheels to .gpu/whl_nb;
# without that the tree and the carry (81 MB on 2026-12-07) exceed a call's 64 MiB and the call is refused.
# Results into results.json: s38/rows.py (cutlass.json) and profile_rows.py (profile.jsonl).
#   bash benchmarks/issue16/s38/call.sh 1  (~8 min) the one open lead for the H200 targets: CUTLASS's swapped-operand
#     Hopper GEMM against cuBLAS (lt_probe.py --cutlass, 32-256 rows), each variant also as *_pf (session 39: its
#     weight tiles prefetched into the L2 before the PDL wait), then in the model's graph step at 32-256 rows
#     (profile_decode.py --cutlass: each product's best variant where it beat cuBLAS) against the model as it is;
#     then skinny_gemm.cu's 4,1 against 1,1 in the graph step at 2, 8, 16 requests.
#   bash benchmarks/issue16/s38/call.sh 2  (~4 min) the fused-path GPU tests; on an H200, issue 16's targets.
source benchmarks/issue16/call_env.sh
if [ "${1:-1}" = 1 ]; then
  r timeout 180 python3 benchmarks/lt_probe.py --cutlass --pm 32,64,128,256 --json $OUT/cutlass.json
  r timeout 100 python3 benchmarks/profile_decode.py cutlass --cutlass $OUT/cutlass.json --bs 32,64,128,256 --json $OUT/profile.jsonl
  r timeout 100 python3 benchmarks/profile_decode.py base --bs 32,64,128,256 --json $OUT/profile.jsonl
  for v in "ga4,1 --skinny-ga 4,1" "ga1,1"; do
    r timeout 60 python3 benchmarks/profile_decode.py $v --bs 2,8,16 --json $OUT/profile.jsonl
  done
else
  r timeout 100 python3 -m pytest -q tests/gpu/test_fused.py -p no:cacheprovider -rfs
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    r timeout 120 python3 benchmarks/bench_gpu.py p1 p2
    cp benchmarks/results.json $OUT/results.json
  fi
fi
echo "call $1 done" >>$LOG
