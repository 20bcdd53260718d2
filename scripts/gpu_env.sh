# Sourced by the scripts/gpu_*.sh: the environment of a GPU run. On the lent H200 (no internet) the
# packages it lacks travel as wheels in .gpu/whl with FlashInfer's prebuilt kernels in .gpu/fi_aot
# (../shared/device/bundle.sh and scripts/build_fi_extra_kernels.sh make them; .gpu/whl_nb holds what only the
# notebooks need, jedi and debugpy, and TVM-FFI 0.1.5: carry it for them); the tree travels without
# .git, so .gpu/COMMIT names the commit it was sent from.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLASHINFER_DISABLE_JIT=${FLASHINFER_DISABLE_JIT:-1} NCCL_NVLS_ENABLE=0
export PYTHONPATH=${PYTHONPATH:-}:$PWD
export PYTHONWARNINGS="ignore:IProgress not found"  # no ipywidgets there: notebooks get text progress bars
if ! python3 -c "import flashinfer" 2>/dev/null && [ -d .gpu/whl ]; then
    # the newest wheel of each package (bundle.sh's TVM-FFI 0.1.5 and gpu_bundle_extra.sh's 0.1.15 sit side by side)
    wheels=$(python3 -c "
import glob, os
from packaging.version import Version
best = {}
for f in glob.glob('.gpu/whl/*.whl') + glob.glob('.gpu/whl_nb/*.whl'):
    name, ver = os.path.basename(f).split('-')[:2]
    if name not in best or Version(ver) > Version(best[name][0]):
        best[name] = (ver, f)
print(' '.join(f for _, f in best.values()))")
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels
    export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/site/bin:$PATH  # /tmp/site/bin: py-spy
    mkdir -p /tmp/site/flashinfer/data/aot && cp -r .gpu/fi_aot/. /tmp/site/flashinfer/data/aot/ 2>/dev/null
fi
[ -f .gpu/COMMIT ] && export MINISGL_COMMIT=$(cat .gpu/COMMIT)
status=0
# run CMD...: echo it, tee its output into $LOG, remember the last non-zero exit status
run() { echo "=== $* ($(date -u +%T))" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; local rc=${PIPESTATUS[0]}; [ $rc -ne 0 ] && status=$rc; echo "=== rc=$rc" | tee -a "$LOG"; }
