#!/usr/bin/env bash
# Session 20, call 5: notebook 07 on the H200 (its stored outputs predated greedy.cu). On CUDA it builds the SmolLM2
# architecture with dummy weights, so the default model's GGUF need not travel.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call5.log
python3 -m ipykernel install --user >/dev/null 2>&1
run timeout 400 python3 scripts/run_notebooks.py "$OUT/nb" notebooks/07_kernels_and_graphs.ipynb
echo "call5: exit status $status" | tee -a "$LOG"
