// Issue 16's CUTLASS probe (benchmarks/lt_probe.py --cutlass; built in session 37, GDC on since 38, not yet run):
// y = x W^T for 17-256 rows with CUTLASS 4.2's Hopper GEMM (TMA loads, wgmma, warp-specialized), the operands swapped
// so that the features are the wgmma's M (128 a tile) and the few rows its N (32-256 a tile): W [n, k] row-major is
// A, x [m, k] row-major is B as a K x N column-major matrix, and D [n, m] column-major is y [m, n] row-major.
// Why: our mma.sync kernels lose to cuBLAS at 17-256 rows (skinny_gemm.cu, pipe_gemm.cu: every block reads all of x).
// The question for the device: does a swapped Hopper GEMM, with x multicast across a cluster (CM = 2) or the work
// split along K by stream-K (SK: every SM busy when n / 128 tiles are fewer than the SMs), beat cuBLAS's 5-7 µs?
// CUTLASS's kernels wait for the kernel before (PDL) before their first load; this probe launches them with and
// without PDL. Built here into a host library (scripts/build_fi_extra_kernels.sh, headers from the nvidia-cutlass
// wheel); it links the CUDA runtime statically and reaches the driver through the runtime's entry points.
// Built twice (session 39): as is, and with SWAP_AB_PF (variants named *_pf, cutlass_swap_ab_pf.so), where the load
// warp asks the L2 for its weight tiles (TMA prefetch) before that wait: the weights never depend on the kernel
// before, so under PDL they can stream in while it runs. The build script puts the hook's call into the two kernels.
#include <cuda_runtime.h>

// Without it CUTLASS compiles its griddepcontrol.wait out, and a PDL launch would read x before its producer ended
#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
#error "build with -DCUTLASS_ENABLE_GDC_FOR_SM90 (scripts/build_fi_extra_kernels.sh does)"
#endif

#ifdef SWAP_AB_PF
namespace probe {  // declared before CUTLASS's kernels, which call it (through the build script's patch) by this name
template <class Mainloop, class GA, class M>
__device__ void warm_weights(Mainloop const& mainloop, GA const& gA_mkl, M const& m_coord, int k_start, int k_tiles);
}
#define SWAP_AB_WARM_WEIGHTS(p, gA, m, k0, kn) ::probe::warm_weights(p, gA, m, k0, kn)
#define SWAP_AB_SUFFIX "_pf"
#else
#define SWAP_AB_SUFFIX ""
#endif

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#ifdef SWAP_AB_PF
// One lane of the load warp, before griddepcontrol.wait: an L2 prefetch (cp.async.bulk.prefetch.tensor) of every
// k tile of A (the weights) that this CTA's first work unit reads: [128 features, k_tiles x TK], through A's own
// TMA descriptor, so the tiles are the ones its loads will ask for. x is not touched: the kernel before writes it.
template <class Mainloop, class GA, class M>
__device__ void probe::warm_weights(Mainloop const& mainloop, GA const& gA_mkl, M const& m_coord, int k_start,
                                    int k_tiles) {
  using cute::_;
  if (cute::elect_one_sync()) {
    auto tAgA = mainloop.tma_load_a.get_slice(0).partition_S(gA_mkl(_, _, m_coord, _, 0));  // (TMA, TMA_M, TMA_K, k)
    for (int k = k_start; k < k_start + k_tiles; ++k) cute::prefetch(mainloop.tma_load_a, tAgA(_, _, _, k));
  }
}
#endif

namespace probe {
using namespace cute;
using T = cutlass::bfloat16_t;

// TM x TN x TK tile (features x rows x k), CM CTAs a cluster along the features (x multicast to them), SK stream-K
template <int TM, int TN, int TK, int CM, bool SK>
struct SwapAB {
  using TileMNK = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterMNK = Shape<Int<CM>, _1, _1>;
  using KernelSchedule = std::conditional_t<SK, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                            cutlass::gemm::KernelTmaWarpSpecialized>;
  using EpiSchedule = std::conditional_t<SK, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                         cutlass::epilogue::TmaWarpSpecialized>;
  using Scheduler = std::conditional_t<SK, cutlass::gemm::StreamKScheduler, void>;
  using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileMNK, ClusterMNK,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, T, cutlass::layout::ColumnMajor, 8, T,
      cutlass::layout::ColumnMajor, 8, EpiSchedule>::CollectiveOp;
  using Main = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, 8, T,
      cutlass::layout::ColumnMajor, 8, float, TileMNK, ClusterMNK,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Main, Epi, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments args(const void* w, const void* x, void* y, int m, int n, int k) {
    auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(n, k, 1));
    auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(m, k, 1));
    auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(n, m, 1));
    static int sms = [] {  // once: the scheduler sizes its persistent grid by it
      int dev = 0, count = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
      return count;
    }();
    cutlass::KernelHardwareInfo hw;
    hw.sm_count = sms;
    return {cutlass::gemm::GemmUniversalMode::kGemm, {n, m, k, 1},
            {static_cast<const T*>(w), sa, static_cast<const T*>(x), sb},
            {{1.f, 0.f}, static_cast<const T*>(y), sd, static_cast<T*>(y), sd}, hw};
  }
  static int can(int m, int n, int k) {
    return Gemm::can_implement(args(nullptr, nullptr, nullptr, m, n, k)) == cutlass::Status::kSuccess ? 0 : 1;
  }
  static size_t workspace(int m, int n, int k) {
    return Gemm::get_workspace_size(args(nullptr, nullptr, nullptr, m, n, k));
  }
  static int run(const void* w, const void* x, void* y, int m, int n, int k, void* ws, cudaStream_t stream, bool pdl) {
    auto a = args(w, x, y, m, n, k);
    Gemm gemm;
    if (gemm.can_implement(a) != cutlass::Status::kSuccess) return 1;
    if (gemm.initialize(a, ws, stream) != cutlass::Status::kSuccess) return 2;
    return gemm.run(stream, nullptr, pdl) == cutlass::Status::kSuccess ? 0 : 3;
  }
};

struct Variant {
  const char* name;
  int (*can)(int, int, int);
  size_t (*workspace)(int, int, int);
  int (*run)(const void*, const void*, void*, int, int, int, void*, cudaStream_t, bool);
};
#define V(TM, TN, TK, CM, SK) \
  {#TM "x" #TN "x" #TK "_c" #CM "_sk" #SK SWAP_AB_SUFFIX, SwapAB<TM, TN, TK, CM, SK>::can,               \
   SwapAB<TM, TN, TK, CM, SK>::workspace, SwapAB<TM, TN, TK, CM, SK>::run}
const Variant variants[] = {V(128, 32, 128, 1, 0), V(128, 32, 128, 2, 0), V(128, 64, 128, 1, 0), V(128, 64, 128, 2, 0),
                            V(128, 128, 64, 1, 0), V(128, 32, 128, 1, 1), V(128, 64, 128, 1, 1), V(128, 128, 64, 1, 1),
                            V(128, 256, 64, 1, 1)};
constexpr int count = sizeof(variants) / sizeof(variants[0]);
}  // namespace probe

// Only these five are exported (built with -fvisibility=hidden): the two libraries hold the same CUTLASS kernels'
// names with different bodies, and neither may lend its copies to the other.
#define SWAP_AB_API extern "C" __attribute__((visibility("default")))
SWAP_AB_API int swap_ab_count() { return probe::count; }
SWAP_AB_API const char* swap_ab_name(int v) { return v >= 0 && v < probe::count ? probe::variants[v].name : nullptr; }
SWAP_AB_API int swap_ab_can(int v, int m, int n, int k) { return probe::variants[v].can(m, n, k); }  // 0: it fits
SWAP_AB_API size_t swap_ab_workspace(int v, int m, int n, int k) { return probe::variants[v].workspace(m, n, k); }
// 0: launched; 1: the shape does not fit the variant; 2: initialize failed; 3: the launch failed; 4: workspace too small
SWAP_AB_API int swap_ab(int v, const void* w, const void* x, void* y, int m, int n, int k, void* ws, size_t ws_bytes,
                        void* stream, int pdl) {
  if (probe::variants[v].workspace(m, n, k) > ws_bytes) return 4;
  return probe::variants[v].run(w, x, y, m, n, k, ws, static_cast<cudaStream_t>(stream), pdl != 0);
}
