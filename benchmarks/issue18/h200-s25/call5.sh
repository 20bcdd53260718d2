#!/usr/bin/env bash
# Session 25, call 5: mixed steps that fit a graph (cb8defc: SmolLM2's mixed budget 2,045 rows while <= 4,096 prompt
# tokens wait) against the old default (--mixed-prefill-tokens 16384: no cap), seeds 101 and 100, traced.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call5.log
mkdir -p $OUT/t
OUT=$OUT/t run timeout 130 python3 benchmarks/issue18/h200-s25/ttft_probe.py --seeds 101,100 --tag _new
OUT=$OUT/t run timeout 130 python3 benchmarks/issue18/h200-s25/ttft_probe.py --seeds 101,100 --tag _old \
    --serve-args "--mixed-prefill-tokens 16384"
gzip $OUT/t/trace_*.json
tar -czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
