#!/usr/bin/env bash
# Session 24, call 5 (run inline): the GPU tests at the wire's commit.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels; source scripts/gpu_env.sh; LOG=$OUT/call5.log
run timeout 280 python3 -m pytest -q -x tests/gpu 2>&1 | tail -5
