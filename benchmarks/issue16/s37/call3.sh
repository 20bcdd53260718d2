#!/usr/bin/env bash
# Session 37, call 3 (never ran: built after the device time ran out; for the next session, after call2.sh): CUTLASS
# 4.2's Hopper GEMM with the operands swapped (benchmarks/kernels/cutlass_swap_ab.cu, lt_probe.py --cutlass; carry
# .gpu/kernels with cutlass_swap_ab.so from CUTLASS=1 ONLY_CUBIN=1 bash scripts/build_fi_extra_kernels.sh) at 16-256
# rows against torch, each variant checked against a float product (rel. err. < 2e-2, bit-equal launch to launch),
# timed with PDL off and on over 28 layers' weights in a CUDA graph, and the best of each product as a layer.
source benchmarks/issue16/call_env.sh
r timeout 150 python3 benchmarks/lt_probe.py --cutlass --json $OUT/cutlass.json
echo call3 done >>$LOG
