// Chapter 7: y = x W^T (+ bias) for a few bf16 rows (decode at batch <= 8), one pass over W.
// At such sizes the product is a read of the weight matrix and nothing else; cuBLAS picks tiles
// for larger M and at M = 1 reaches a third of the bandwidth on some shapes (seen on the H200).
// One warp per output column n: each lane streams 16-byte pieces of W's row n, eight in flight,
// and dots them with the matching pieces of every row of x (x is small and stays in L1/L2).
// Built for sm_90a by scripts/build_fi_extra_kernels.sh (nvcc -cubin); loaded by qk_kernel.py.
#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;
#define MAX_M 8
#define UNROLL 8

__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// x [m, k] (row stride x_stride elements), w [n, k] row-major, bias [n] or nullptr, y [m, n].
// Needs k % 8 == 0 and 16-byte aligned rows (the caller checks).
extern "C" __global__ void gemv_bf16(const bf16* __restrict__ x, long long x_stride, const bf16* __restrict__ w,
                                     const bf16* __restrict__ bias, bf16* __restrict__ y, int m, int n, int k) {
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= n) return;  // whole warps exit together
  const uint4* wr = reinterpret_cast<const uint4*>(w + (long long)row * k);
  const int kv = k / 8;  // 16-byte pieces per row
  float acc[MAX_M];
#pragma unroll
  for (int j = 0; j < MAX_M; j++) acc[j] = 0.f;
  for (int base = lane; base < kv; base += 32 * UNROLL) {
    uint4 wv[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++)  // issue every load of this round before any arithmetic
      if (base + 32 * u < kv) wv[u] = __ldg(wr + base + 32 * u);
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      const int i = base + 32 * u;
      if (i < kv) {
        float wf[8];
        unpack8(wv[u], wf);
#pragma unroll
        for (int j = 0; j < MAX_M; j++) {
          if (j < m) {
            float xf[8];
            unpack8(__ldg(reinterpret_cast<const uint4*>(x + j * x_stride) + i), xf);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[j] += wf[e] * xf[e];
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < MAX_M; j++) {
    if (j < m) {
      float s = acc[j];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) {
        if (bias != nullptr) s += __bfloat162float(bias[row]);
        y[(long long)j * n + row] = __float2bfloat16(s);
      }
    }
  }
}
