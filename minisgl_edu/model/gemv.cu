// Chapter 7 (issue 16): one row through a linear layer at memory speed, y = x W^T with x [1, k], W [n, k].
// At one row a GEMM is a matrix-vector product: every weight byte is read once and used once, so the kernel
// only has to keep enough loads in flight. Each block owns R output rows; its T threads split k between them
// (thread t reads 16-byte chunks t, t + T, ... of every row), so all R * J loads of a thread are issued before
// any arithmetic, and the grid has n / R blocks, not n / 8 warps: the whole matrix is in flight at once.
// The partial sums meet in a warp shuffle, then in shared memory.
// silu_gemv: the MLP's tail, down(silu(gate) * up), with x = [gate | up]: silu(gate) * up is rounded to bf16
// as FlashInfer's silu_and_mul stores it, so it is the same product as the two kernels it replaces, in one.
// norm_gemv: the residual add and the RMSNorm before q|k|v and gate|up, folded in: with x the previous block's
// output and res the residual stream, the product's input is rmsnorm(x + res) (FlashInfer's fused_add_rmsnorm:
// the sum in float, its square's mean over the whole row, the result rounded once), and block 0 writes the new
// residual stream x + res to res_out (not in place: the other blocks still read res). Every block reads the
// whole input row, its threads one slice each, so the row's sum of squares is one reduction per block.
// cuBLAS at one row: a split-K GEMM plus a reduce kernel for down (3072 -> 1024), a slow tile for o_proj.
// Built for sm_90a by scripts/build_fi_extra_kernels.sh; every (T, R, J) below is a separate entry point
// (benchmarks/bench_gpu.py gemv times them all; model/qk_kernel.py launches GEMV_CONFIG's).
#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint4 ld16(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

enum Input { PLAIN, SILU, NORM };  // what the product's input row is: x, silu(gate) * up, or rmsnorm(x + res)

template <int T>
__device__ __forceinline__ float block_sum(float v, float* scratch) {  // every thread gets the block's sum
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int p = 0; p < T / 32; p++) s += scratch[p];
  return s;
}

template <int T, int R, int J, int IN>
__device__ __forceinline__ void gemv_one_row(const bf16* __restrict__ x, int k, const bf16* __restrict__ w, int n,
                                             bf16* __restrict__ out, const bf16* __restrict__ res = nullptr,
                                             const bf16* __restrict__ norm_w = nullptr, float eps = 0.f,
                                             bf16* __restrict__ res_out = nullptr) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, row0 = blockIdx.x * R;
  const int chunks = k >> 3;  // 8 bf16 per 16-byte load
  uint4 wv[R][J];
#pragma unroll
  for (int j = 0; j < J; j++) {  // the weight loads first: they are the DRAM latency to hide
    const int c = tid + j * T;
#pragma unroll
    for (int r = 0; r < R; r++)
      if (c < chunks && row0 + r < n) wv[r][j] = ld16(w + (long long)(row0 + r) * k + c * 8);
  }
  // Programmatic dependent launch (KERNELS.pdl): the weights depend on no kernel, so they are in flight while the
  // kernel before this one drains; x (and res) are its output: wait for it here. The next kernel may launch now
  // and load its own weights. Launched without the attribute (the plain twin), both instructions do nothing.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float a[J][8];  // this thread's slice of the input row, in float
#pragma unroll
  for (int j = 0; j < J; j++) {
    const int c = tid + j * T;
    if (c < chunks) {
      const uint4 g4 = ld16(x + c * 8);
      const bf16* g = reinterpret_cast<const bf16*>(&g4);
      if (IN == NORM) {  // a = x + res in float; the new residual stream rounded, once, by block 0
        const uint4 r4 = ld16(res + c * 8);
        const bf16* rr = reinterpret_cast<const bf16*>(&r4);
        uint4 o4;
        bf16* ob = reinterpret_cast<bf16*>(&o4);
#pragma unroll
        for (int e = 0; e < 8; e++) {
          a[j][e] = __bfloat162float(g[e]) + __bfloat162float(rr[e]);
          ob[e] = __float2bfloat16(a[j][e]);
        }
        if (blockIdx.x == 0) *reinterpret_cast<uint4*>(res_out + c * 8) = o4;
      } else if (IN == SILU) {
        const uint4 u4 = ld16(x + k + c * 8);
        const bf16* u = reinterpret_cast<const bf16*>(&u4);
#pragma unroll
        for (int e = 0; e < 8; e++) {
          const float v = __bfloat162float(g[e]);
          a[j][e] = __bfloat162float(__float2bfloat16(v / (1.f + __expf(-v)) * __bfloat162float(u[e])));
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; e++) a[j][e] = __bfloat162float(g[e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; e++) a[j][e] = 0.f;  // outside the row: adds nothing to the norm's sum
    }
  }
  __shared__ float part[T / 32][R];
  if (IN == NORM) {  // rmsnorm over the whole row: each thread holds its slice, the block the row
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < J; j++)
#pragma unroll
      for (int e = 0; e < 8; e++) sq += a[j][e] * a[j][e];
    const float rcp = rsqrtf(block_sum<T>(sq, &part[0][0]) / k + eps);
#pragma unroll
    for (int j = 0; j < J; j++) {
      const int c = tid + j * T;
      if (c < chunks) {
        const uint4 w4 = ld16(norm_w + c * 8);
        const bf16* nw = reinterpret_cast<const bf16*>(&w4);
#pragma unroll
        for (int e = 0; e < 8; e++) a[j][e] = __bfloat162float(__float2bfloat16(a[j][e] * rcp * __bfloat162float(nw[e])));
      }
    }
    __syncthreads();  // part is reused below
  }
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    acc[r] = 0.f;
#pragma unroll
    for (int j = 0; j < J; j++) {
      if (tid + j * T < chunks) {
        const bf16* wb = reinterpret_cast<const bf16*>(&wv[r][j]);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[r] += __bfloat162float(wb[e]) * a[j][e];
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; r++) part[warp][r] = acc[r];
  }
  __syncthreads();
  if (tid < R && row0 + tid < n) {
    float s = 0.f;
#pragma unroll
    for (int p = 0; p < T / 32; p++) s += part[p][tid];
    out[row0 + tid] = __float2bfloat16(s);
  }
}

#define GEMV(T, R, J)                                                                                             \
  extern "C" __global__ void __launch_bounds__(T) gemv_t##T##_r##R##_j##J(                                        \
      const bf16* __restrict__ x, int k, const bf16* __restrict__ w, int n, bf16* __restrict__ out) {             \
    gemv_one_row<T, R, J, PLAIN>(x, k, w, n, out);                                                                \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(T) silu_gemv_t##T##_r##R##_j##J(                                   \
      const bf16* __restrict__ x, int k, const bf16* __restrict__ w, int n, bf16* __restrict__ out) {             \
    gemv_one_row<T, R, J, SILU>(x, k, w, n, out);                                                                 \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(T) norm_gemv_t##T##_r##R##_j##J(                                   \
      const bf16* __restrict__ x, int k, const bf16* __restrict__ w, int n, bf16* __restrict__ out,               \
      const bf16* __restrict__ res, const bf16* __restrict__ norm_w, float eps, bf16* __restrict__ res_out) {     \
    gemv_one_row<T, R, J, NORM>(x, k, w, n, out, res, norm_w, eps, res_out);                                      \
  }
#define GEMV_JS(T, R) GEMV(T, R, 1) GEMV(T, R, 2) GEMV(T, R, 3) GEMV(T, R, 4) GEMV(T, R, 6)

// (64 threads, and 1 or 8 rows per block, were slower everywhere in the H200 sweep: not built)
GEMV_JS(128, 2) GEMV_JS(128, 4)
GEMV_JS(256, 2) GEMV_JS(256, 4)
