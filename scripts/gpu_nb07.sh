#!/usr/bin/env bash
# Notebook 07 (chapter 7) on a lent H200 in one call. Its GPU engine is SmolLM2's architecture with dummy weights, so
# no GGUF travels (scripts/gpu_notebooks.sh sends one for the others), but the notebooks' wheels (.gpu/whl_nb) must
# travel beside .gpu/whl, FlashInfer's kernels and our cubins, and all of it with the tree within one call's 64 MiB.
# `hold` moves what this notebook does not use to .gpu/held (FlashInfer's head-dim-128 kernels: Qwen3's; the probes'
# cubins; jedi and debugpy, which IPython and ipykernel do without; openai: notebook 09's), `restore` moves it back.
#   bash scripts/gpu_nb07.sh hold                 # here; it prints what the carry weighs
#   device call, kind nvidia-h200, carry [".gpu/whl", ".gpu/whl_nb", ".gpu/fi_aot", ".gpu/kernels", ".gpu/COMMIT"]:
#       bash scripts/gpu_nb07.sh                  # brings back $OUT/nb07.tar (the executed notebook) and its log
#   tar -xf <files_at>/nb07.tar -C notebooks/ && python3 scripts/draw_diagrams.py && bash scripts/gpu_nb07.sh restore
set -uo pipefail
cd "$(dirname "$0")/.."
HELD=.gpu/held
case "${1:-run}" in
hold)
    mkdir -p $HELD/fi_aot $HELD/kernels $HELD/whl_nb
    for d in .gpu/fi_aot/*head_dim_qk_128* .gpu/fi_aot/*head_dim_128*; do [ -e "$d" ] && mv "$d" $HELD/fi_aot/; done
    for f in pipe_gemm.cubin cutlass_swap_ab.so cutlass_swap_ab_pf.so; do [ -e .gpu/kernels/$f ] && mv .gpu/kernels/$f $HELD/kernels/; done
    for p in jedi debugpy openai; do for w in .gpu/whl_nb/$p-*.whl; do [ -e "$w" ] && mv "$w" $HELD/whl_nb/; done; done
    dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo "+uncommitted changes")
    echo "$(git rev-parse --short HEAD)$dirty" > .gpu/COMMIT
    tree=$( (git ls-files; git ls-files --others --exclude-standard) | tr '\n' '\0' | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    gpu=$(du -cb .gpu/whl .gpu/whl_nb .gpu/fi_aot .gpu/kernels .gpu/COMMIT | tail -1 | cut -f1)
    echo "carry $((gpu / 1048576)) MiB + tree $((tree / 1048576)) MiB = $(((gpu + tree) / 1048576)) MiB (at most 64)"
    [ $((gpu + tree)) -le $((64 * 1048576)) ] || { echo "over 64 MiB: hold back more" >&2; exit 1; } ;;
restore)
    for k in fi_aot kernels whl_nb; do [ -d $HELD/$k ] && cp -a $HELD/$k/. .gpu/$k/ && rm -rf "${HELD:?}/$k"; done
    rmdir $HELD 2>/dev/null; du -sh .gpu/* ;;
run)
    source scripts/gpu_env.sh
    LOG=$OUT/gpu_nb07.log
    python3 -m ipykernel install --user >/dev/null 2>&1
    run nvidia-smi --query-gpu=name,memory.total --format=csv
    run python3 scripts/run_notebooks.py "$OUT/nb" notebooks/07_kernels_and_graphs.ipynb
    tar -C "$OUT/nb" -cf "$OUT/nb07.tar" . && rm -rf "$OUT/nb"
    echo "gpu_nb07: exit status $status" | tee -a "$LOG"
    exit $status ;;
*)
    echo "usage: bash scripts/gpu_nb07.sh [hold|restore]" >&2; exit 2 ;;
esac
