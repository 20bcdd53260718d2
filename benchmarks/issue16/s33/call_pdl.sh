#!/usr/bin/env bash
# Session 33, device call: programmatic dependent launch (benchmarks/issue16/s32/pdl.patch) against main, side by
# side on one machine; on an H200 first the reading at main (bench_gpu.py p1 p1b p2 free).
# Needs carry: .gpu/whl .gpu/fi_aot .gpu/kernels .gpu/pdl (patched qk_kernel.py + cubins built from the patch) .gpu/COMMIT
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
save() { cp benchmarks/results.json $OUT/results_main.json; cp /tmp/pdl/benchmarks/results.json $OUT/results_pdl.json 2>/dev/null; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
MAIN=$PWD
rm -rf /tmp/pdl && mkdir /tmp/pdl && tar --exclude=./.gpu -cf - . | (cd /tmp/pdl && tar xf -)
cp .gpu/pdl/qk_kernel.py /tmp/pdl/minisgl_edu/model/qk_kernel.py
pdl() { (cd /tmp/pdl && PYTHONPATH=/tmp/pdl:$PYTHONPATH MINISGL_CUBIN_DIR=$MAIN/.gpu/pdl/kernels MINISGL_PDL=${P:-1} "$@"); }
if [[ $GPU == *H200* ]]; then
  r timeout 300 python3 benchmarks/bench_gpu.py p1 p1b p2 free; save
fi
r pdl timeout 200 python3 -m pytest -q -x tests/gpu -p no:cacheprovider
for i in 1 2; do
  r timeout 60 python3 benchmarks/profile_decode.py main --bs 1,64,128,256
  P=1 r pdl timeout 60 python3 benchmarks/profile_decode.py pdl1 --bs 1,64,128,256
done
[[ $GPU == *H200* ]] || P=0 r pdl timeout 60 python3 benchmarks/profile_decode.py pdl0 --bs 1,64,128,256
[[ $GPU == *H200* ]] || { r timeout 150 python3 benchmarks/bench_gpu.py p1 p2; save; }
P=1 r pdl timeout 150 python3 benchmarks/bench_gpu.py p1 p2; save
echo done >>$LOG
