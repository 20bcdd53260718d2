#!/usr/bin/env bash
# Session 13, issue 18: scripts/gpu_serve.sh at the restored size-based mixed budget, the target rate only (0.5 x the
# measured peak): serve / offline with 256 requests at once, then 128 requests at half the peak rate, both models.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
GPU_SERVE_RATES=0.5x GPU_SERVE_LIMIT=150 bash scripts/gpu_serve.sh
