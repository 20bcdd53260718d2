#!/usr/bin/env bash
# Session 25, call 3: seed 104's TTFT tail, traced (ttft_probe.py).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call3.log
mkdir -p $OUT/t && OUT=$OUT/t run timeout 400 python3 benchmarks/issue18/h200-s25/ttft_probe.py
tar -czf $OUT/ttft.tgz -C $OUT t && rm -rf $OUT/t
