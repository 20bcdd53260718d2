#!/usr/bin/env bash
# Wheels the lent H200 needs beyond ../shared/device/bundle.sh: xgrammar (structured output, chapter 9) with the
# newer TVM-FFI it requires (>= 0.1.11; FlashInfer 0.5.3's prebuilt kernels load with it: tests/gpu passed on the
# H200 with 0.1.15.post2, 2026-12-01), py-spy (the sampling profiler scripts/gpu_profile_serve.sh uses) and httptools
# (uvicorn's compiled HTTP parser: without it the H200's API server ran the pure-Python h11).
# gpu_env.sh installs the newest version of each package it finds in .gpu/whl, so the two TVM-FFIs do not clash.
# Run once from the project root, after bundle.sh:  bash scripts/gpu_bundle_extra.sh (it also moves the notebooks-only
# wheels to whl_nb, below)
set -euo pipefail
OUTDIR=${GPU_BUNDLE_DIR:-.gpu}
mkdir -p "$OUTDIR/whl"
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 \
    --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
    --platform any -d "$OUTDIR/whl" xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2 py-spy==0.4.3 httptools==0.9.0 2> >(grep -v "^WARNING" >&2)
ls "$OUTDIR/whl" | grep -E "xgrammar|tvm_ffi|py_spy|httptools"
# What only the notebooks need goes to $OUTDIR/whl_nb (gpu_env.sh installs both folders): with it, .gpu/whl beside
# fi_aot and the tree no longer fits one call's 64 MiB. Notebook runs carry whl_nb in a call of its own (the machine
# keeps it while warm); jsonschema and its helpers stay in whl: the API server imports them.
mkdir -p "$OUTDIR/whl_nb"
for p in jedi debugpy ipython ipython_pygments_lexers ipykernel prompt_toolkit tornado wcwidth parso pexpect ptyprocess \
         jupyter_client jupyter_core nbformat nbclient nbmake matplotlib_inline stack_data executing asttokens pure_eval \
         comm nest_asyncio2 fastjsonschema apache_tvm_ffi-0.1.5; do
    for w in "$OUTDIR"/whl/"$p"-*.whl; do [ -e "$w" ] && mv "$w" "$OUTDIR/whl_nb/"; done
done
du -sh "$OUTDIR/whl" "$OUTDIR/whl_nb"
