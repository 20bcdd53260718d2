// Chapter 7 (issue 16), an experiment: products of a few rows (decode at batch <= 8) at memory speed.
// silu_mul_down: the MLP's tail in one kernel, out = down(silu(gate) * up); without it, FlashInfer's
// SiLU-and-mul, then cuBLAS's down GEMM, which at one row splits K and adds a kernel to reduce the parts.
// small_m_linear: the same product without the activation (o_proj, where cuBLAS's tile is slow at one row).
// Each block first writes its input rows (silu(gate) * up rounded once to bf16, as silu_and_mul stores it)
// into shared memory; then each warp computes one output row: it streams its row of W with 16-byte
// loads, all issued before any arithmetic (up to 16 per lane in flight), and reduces the M dot products
// across its lanes. Built for sm_90a by scripts/build_fi_extra_kernels.sh.
#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;
#define MAX_M 8
#define MAX_ITERS 16  // I <= 16 * 256 = 4096

__device__ __forceinline__ uint4 ld16(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// SILU: gu = [m, 2 * inter] (gate, then up) and the product's input is silu(gate) * up; else gu = x [m, inter].
// Row stride gu_stride; w: [hidden, inter] row-major; out: [m, hidden]. Needs inter % 256 == 0, inter <= 4096,
// m <= 8, m * inter * 2 bytes of shared memory, 16-byte aligned rows.
template <bool SILU>
__device__ __forceinline__ void small_m_product(const bf16* __restrict__ gu, long long gu_stride, int m, int inter,
                                                const bf16* __restrict__ w, int hidden, bf16* __restrict__ out) {
  extern __shared__ __align__(16) bf16 act[];  // [m, inter]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int row = blockIdx.x * warps + warp;
  const int iters = inter / 256;  // 32 lanes x 8 elements per 16-byte load
  uint4 wv[MAX_ITERS];
  if (row < hidden) {  // the weight loads first: they are the DRAM latency this kernel hides
    const bf16* wr = w + (long long)row * inter;
#pragma unroll
    for (int i = 0; i < MAX_ITERS; i++)
      if (i < iters) wv[i] = ld16(wr + (i * 32 + lane) * 8);
  }
  // the input rows into shared memory (SILU: silu(gate) * up in float, stored as bf16): 16-byte chunks, 4 loads in flight
  const int per_row = inter / 8, chunks = m * per_row;
  for (int c0 = threadIdx.x; c0 < chunks; c0 += 4 * blockDim.x) {
    uint4 g4[4], u4[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int c = c0 + q * blockDim.x;
      if (c < chunks) {
        const bf16* src = gu + (long long)(c / per_row) * gu_stride + (c % per_row) * 8;
        g4[q] = ld16(src);
        if (SILU) u4[q] = ld16(src + inter);
      }
    }
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int c = c0 + q * blockDim.x;
      if (c < chunks) {
        const bf16* g = reinterpret_cast<const bf16*>(&g4[q]);
        const bf16* u = reinterpret_cast<const bf16*>(&u4[q]);
        uint4 o = g4[q];  // the plain product: x itself
        bf16* ob = reinterpret_cast<bf16*>(&o);
        if (SILU) {
#pragma unroll
          for (int j = 0; j < 8; j++) {
            const float x = __bfloat162float(g[j]);
            ob[j] = __float2bfloat16(x / (1.f + __expf(-x)) * __bfloat162float(u[j]));
          }
        }
        *reinterpret_cast<uint4*>(act + (c / per_row) * inter + (c % per_row) * 8) = o;
      }
    }
  }
  __syncthreads();
  if (row >= hidden) return;
  float acc[MAX_M];
#pragma unroll
  for (int r = 0; r < MAX_M; r++) acc[r] = 0.f;
#pragma unroll
  for (int i = 0; i < MAX_ITERS; i++) {
    if (i < iters) {
      const bf16* wb = reinterpret_cast<const bf16*>(&wv[i]);
      const int k0 = (i * 32 + lane) * 8;
#pragma unroll
      for (int r = 0; r < MAX_M; r++) {
        if (r < m) {
          const uint4 av = *reinterpret_cast<const uint4*>(act + r * inter + k0);  // conflict-free: 16 B per lane
          const bf16* a = reinterpret_cast<const bf16*>(&av);
#pragma unroll
          for (int j = 0; j < 8; j++) acc[r] += __bfloat162float(wb[j]) * __bfloat162float(a[j]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < MAX_M; r++) {
    if (r < m) {
      float s = acc[r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) out[(long long)r * hidden + row] = __float2bfloat16(s);
    }
  }
}

extern "C" __global__ void silu_mul_down(const bf16* __restrict__ gu, long long gu_stride, int m, int inter,
                                         const bf16* __restrict__ w, int hidden, bf16* __restrict__ out) {
  small_m_product<true>(gu, gu_stride, m, inter, w, hidden, out);
}

// out = x @ w.T for m <= 8 rows (o_proj at batch <= 8: cuBLAS picks a 16-CTA tile there, 12 us for 4 MB).
extern "C" __global__ void small_m_linear(const bf16* __restrict__ x, long long x_stride, int m, int k,
                                          const bf16* __restrict__ w, int n, bf16* __restrict__ out) {
  small_m_product<false>(x, x_stride, m, k, w, n, out);
}
