#!/usr/bin/env bash
# Build FlashInfer's fused RMSNorm (+ fused residual add, q/k head norm) / RoPE / SiLU-and-mul kernels and XQA decode
# for the H200 (sm_90a) on this CPU machine, next to the attention kernels that ../shared/device/bundle.sh
# put in .gpu/fi_aot/, so the GPU machine compiles nothing. Same recipe as bundle.sh step 3, for more
# modules. Then our own one-launch q/k norm + RoPE + K/V store kernel (minisgl_edu/model/qk_kernel.py)
# as a cubin in .gpu/kernels/. ONLY_CUBIN=1 builds just that (seconds).
set -euo pipefail
OUTDIR=${GPU_BUNDLE_DIR:-.gpu}
SRC=$(cd "$(dirname "$0")/.." && pwd)/minisgl_edu/model
mkdir -p "$OUTDIR/kernels"
for k in qk_norm_rope_store gemv kv_indices greedy skinny_gemm; do
  ${CUDA_HOME:-/usr/local/cuda}/bin/nvcc -cubin -arch=sm_90a -O3 -o "$OUTDIR/kernels/$k.cubin" "$SRC/$k.cu"
  echo "built $OUTDIR/kernels/$k.cubin"
done
# benchmarks/lt_probe.py --l2's prefetch kernel (a probe's, not the library's)
${CUDA_HOME:-/usr/local/cuda}/bin/nvcc -cubin -arch=sm_90a -O3 -o "$OUTDIR/kernels/l2_prefetch.cubin" "$SRC/../../benchmarks/kernels/l2_prefetch.cu"
# benchmarks/lt_probe.py --pipe's pipelined product (a probe's, session 37)
${CUDA_HOME:-/usr/local/cuda}/bin/nvcc -cubin -arch=sm_90a -O3 -o "$OUTDIR/kernels/pipe_gemm.cubin" "$SRC/../../benchmarks/kernels/pipe_gemm.cu"
# benchmarks/lt_probe.py --cutlass's host library (a probe's, session 37; minutes): CUTLASS 4.2's Hopper GEMM, the
# headers from the nvidia-cutlass wheel, the CUDA runtime linked in statically; GDC on, or a PDL launch would not wait
if [ "${CUTLASS:-0}" = 1 ]; then
  CUT=$(mktemp -d); pip download -q --no-deps -d "$CUT" nvidia-cutlass==4.2.0.0 && (cd "$CUT" && unzip -q -o ./*.whl "cutlass_library/source/include/*" "cutlass_library/source/tools/util/include/*")
  # CUTLASS 4.2's stream-K is_last_tile (compiled only with GDC on) binds a const member to a non-const reference:
  # give it a copy, as its own comment says it should have
  perl -0pi -e 's/(bool is_last_tile\(WorkTileInfo work_tile_info, uint32_t advance_count = 1\) const \{)/$1\n    uint32_t unit_iter_start_copy = unit_iter_start_;/; s/(get_current_work_for_linear_idx\(\n\s+)unit_iter_start_,/$1unit_iter_start_copy,/' \
    "$CUT/cutlass_library/source/include/cutlass/gemm/kernel/sm90_tile_scheduler_stream_k.hpp"
  # the *_pf variants' hook (session 39): the call to SWAP_AB_WARM_WEIGHTS, if defined, just before the load warp's
  # griddepcontrol.wait in the two kernels the probe uses (data-parallel, and stream-K's first work unit)
  K="$CUT/cutlass_library/source/include/cutlass/gemm/kernel"
  perl -0pi -e 's/^(\s*)(cutlass::arch::wait_on_dependent_grids\(\);\n(?=\s*collective_mainloop\.load\())/#ifdef SWAP_AB_WARM_WEIGHTS\n$1SWAP_AB_WARM_WEIGHTS(params.mainloop, gA_mkl, m_coord, 0, k_tile_count);\n#endif\n$1$2/m' \
    "$K/sm90_gemm_tma_warpspecialized.hpp"
  perl -0pi -e 's/^(\s*)(cutlass::arch::wait_on_dependent_grids\(\);\n(?=\s*bool do_load_order_arrive = true;))/#ifdef SWAP_AB_WARM_WEIGHTS\n$1if (work_tile_info.is_valid()) SWAP_AB_WARM_WEIGHTS(params.mainloop, gA_mkl, idx2crd(work_tile_info.M_idx, shape<2>(gA_mkl)), TileScheduler::get_work_k_tile_start(work_tile_info), TileScheduler::get_work_k_tile_count(work_tile_info, problem_shape_MNKL, blk_shape));\n#endif\n$1$2/m' \
    "$K/sm90_gemm_tma_warpspecialized_cooperative.hpp"
  for h in sm90_gemm_tma_warpspecialized sm90_gemm_tma_warpspecialized_cooperative; do
    [ "$(grep -c 'SWAP_AB_WARM_WEIGHTS(' "$K/$h.hpp")" = 1 ] || { echo "the prefetch hook did not go into $h.hpp" >&2; exit 1; }
  done
  for pf in "" _pf; do
    mkdir -p "$CUT/keep$pf"  # the build's PTX, kept to be checked below
    ${CUDA_HOME:-/usr/local/cuda}/bin/nvcc -std=c++17 -arch=sm_90a -O3 -DNDEBUG -DCUTLASS_ENABLE_GDC_FOR_SM90 ${pf:+-DSWAP_AB_PF} \
      --expt-relaxed-constexpr -Xcompiler -fPIC,-fvisibility=hidden -shared -keep -keep-dir "$CUT/keep$pf" \
      -I"$CUT/cutlass_library/source/include" -I"$CUT/cutlass_library/source/tools/util/include" \
      -o "$OUTDIR/kernels/cutlass_swap_ab$pf.so" "$SRC/../../benchmarks/kernels/cutlass_swap_ab.cu"
    # the L2 prefetches are TMA's (tensor coordinates), in the _pf library only (its PTX, kept from this build)
    n=$(cat "$CUT/keep$pf"/*.ptx | grep -c 'cp.async.bulk.prefetch.tensor' || true)
    if { [ -n "$pf" ] && [ "$n" = 0 ]; } || { [ -z "$pf" ] && [ "$n" != 0 ]; }; then echo "cutlass_swap_ab$pf.so: $n TMA prefetches" >&2; exit 1; fi
    echo "built $OUTDIR/kernels/cutlass_swap_ab$pf.so ($n TMA prefetches in its PTX)"
  done
fi
[ "${ONLY_CUBIN:-0}" = 1 ] && exit 0
VENV=${FI_VENV:-$(mktemp -d)/venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0
  "$VENV/bin/pip" install -q --no-deps flashinfer-python==0.5.3 apache-tvm-ffi==0.1.5 ninja filelock numpy \
      packaging nvidia-ml-py requests urllib3 idna certifi typing-extensions
fi
STUB=$(mktemp -d); echo > "$STUB/e.c"; gcc -shared -o "$STUB/libcuda.so" -Wl,-soname,libcuda.so.1 "$STUB/e.c"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# the norm module includes cublasLt.h and curand_kernel.h, which this toolkit lacks: take the headers from the wheels
CUB=$(mktemp -d); pip download -q --no-deps -d "$CUB" nvidia-cublas nvidia-curand && (cd "$CUB" && for w in *.whl; do unzip -q -o "$w" "nvidia/cu13/include/*"; done)
export FLASHINFER_EXTRA_CUDAFLAGS="-I$CUB/nvidia/cu13/include" FLASHINFER_EXTRA_CFLAGS="-I$CUB/nvidia/cu13/include"
WS=$(mktemp -d)
CUDA_HOME=$CUDA_HOME FLASHINFER_EXTRA_LDFLAGS="-L$STUB" FLASHINFER_CUDA_ARCH_LIST=9.0a \
FLASHINFER_WORKSPACE_BASE=$WS MAX_JOBS=2 PATH="$VENV/bin:$PATH" "$VENV/bin/python" - <<'PY'
import time
from flashinfer.jit.norm import gen_norm_module
from flashinfer.jit.rope import gen_rope_module
from flashinfer.jit.activation import gen_act_and_mul_module
import torch
from flashinfer.jit.xqa import gen_xqa_module
bf = torch.bfloat16
# XQA for pages of 16 (benchmarks/lt_probe.py --xqa; benchmarks/issue16/s31/xqa_decode.patch's XQA_DECODE): Qwen3-0.6B's heads (128, GQA 2), SmolLM2's (64, GQA 3)
xqa = [(f"xqa_{hd}_{g}", gen_xqa_module(bf, bf, 16, hd, g, False, bf)) for hd, g in ((128, 2), (64, 3))]
for name, spec in [("norm", gen_norm_module()), ("rope", gen_rope_module()), ("silu_and_mul", gen_act_and_mul_module("silu"))] + xqa:
    t = time.time(); spec.write_ninja(); spec.build(verbose=False)
    print(f"built {name} in {time.time() - t:.0f}s", flush=True)
PY
for f in "$WS"/.cache/flashinfer/0.5.3/90a/cached_ops/*/*.so; do
  n=$(basename "$f" .so); mkdir -p "$OUTDIR/fi_aot/$n"; cp "$f" "$OUTDIR/fi_aot/$n/"
done
ls "$OUTDIR/fi_aot"
