// Issue 16's pipelined product probe (benchmarks/lt_probe.py --pipe; session 37): y = x W^T for 17-256 rows, the
// weights and x streamed through a ring of ST shared-memory stages, so loads and mmas overlap, unlike skinny_gemm.cu
// (which loads, then waits for all of x, then multiplies, and at 64 rows keeps 64 of 132 SMs busy, one block each).
// Why: at 17-256 rows cuBLAS takes 5-7 µs a product (about 1.25 TB/s on these 2-12 MB weights, Nsight Compute in
// session 36), the weights alone 2-3 µs at the copy rate; the products are the largest share of issue 16's gap on the
// H200 (bench_gpu.py free: P1 0.628 as it is, 0.769 with the products skipped).
// Measured (session 37, H100, all 468 configurations correct): slower than cuBLAS at every size, a layer's four
// products 34 against 25 µs at 16 rows and 91 against 32 at 256. Each block reads all of x's rows, so x crosses from
// the L2 once per block (8x qkv's weight bytes at 256 rows). Kept as the record of a refuted probe.
// Layout: a block owns BM = 16 MT rows (all of x's rows, zero-filled past m) and BN = 8 NTW WN features, over one K
// slice (grid.y slices; more than one: float partials summed by the last block, skinny_gemm.cu's last_block_sum).
// WM x WN warps; a warp owns MT / WM 16-row tiles and NTW groups of 8 features, fragments through ldmatrix.
// The weights of the first ST - 1 stages are requested before griddepcontrol.wait (programmatic dependent launch:
// they depend on no kernel), and with PF the rest of the block's weights are prefetched into the L2 there too.
//
//   shared memory, ST stages, rows of LD = BK + 8 bf16 (144 bytes: ldmatrix's 8 rows fall in 8 bank groups)
//   | W stage 0 [BN][LD] | ... | W stage ST-1 | x stage 0 [BM][LD] | ... | x stage ST-1 |
//   k-block kb lives in stage kb % ST; in iteration kb the loads of kb + ST - 1 go to stage (kb - 1) % ST, which
//   every warp finished reading in iteration kb - 1 (the __syncthreads between)
//
//   cp.async groups, in commit order         the group k-block kb waits for    groups allowed pending then
//   W(0..ST-2) | x(0) ... x(ST-2) | L(ST-1) ... (one an iteration, empty past the end)   x(kb) or L(kb)   ST - 2
#define SKINNY_NO_ENTRIES
#include "../../minisgl_edu/model/skinny_gemm.cu"

__device__ __forceinline__ void cp_async16_zfill(bf16* smem, const bf16* gmem, bool keep) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(keep ? 16 : 0) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const bf16* p) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void ldsm_x2(uint32_t* r, const bf16* p) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

template <int MT, int WM, int WN, int NTW, int ST, bool PF>
__device__ __forceinline__ void pipe(const bf16* __restrict__ x, int m, const bf16* __restrict__ w, int n, int k,
                                     bf16* __restrict__ out, float* __restrict__ ws, unsigned* __restrict__ tickets) {
  constexpr int BM = 16 * MT, BN = 8 * NTW * WN, BK = 64, LD = BK + 8, T = 32 * WM * WN, MTW = MT / WM;
  static_assert(MT % WM == 0 && ST >= 2, "whole row tiles a warp; at least two stages");
  extern __shared__ __align__(16) bf16 sm[];
  bf16* wsm = sm;                // [ST][BN][LD]
  bf16* xsm = sm + ST * BN * LD;  // [ST][BM][LD]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp / WN, wn = warp % WN;
  const int S = gridDim.y, KS = k / S, k0 = blockIdx.y * KS, KB = KS / BK, f0 = blockIdx.x * BN;
  const bf16* wblk = w + (long long)f0 * k + k0;
  auto load_w = [&](int kb) {  // BN rows of 8 16-byte pieces
#pragma unroll
    for (int c = tid; c < BN * 8; c += T) {
      const int r = c >> 3, e = (c & 7) * 8;
      cp_async16(wsm + ((kb % ST) * BN + r) * LD + e, wblk + (long long)r * k + kb * BK + e);
    }
  };
  auto load_x = [&](int kb) {  // BM rows; rows >= m zero-filled (their outputs are never written)
#pragma unroll
    for (int c = tid; c < BM * 8; c += T) {
      const int r = c >> 3, e = (c & 7) * 8;
      cp_async16_zfill(xsm + ((kb % ST) * BM + r) * LD + e, x + (long long)min(r, m - 1) * k + k0 + kb * BK + e, r < m);
    }
  };
#pragma unroll
  for (int kb = 0; kb < ST - 1; kb++)
    if (kb < KB) load_w(kb);
  asm volatile("cp.async.commit_group;" ::: "memory");
  if (PF && tid < BN && KB > ST - 1)  // the rest of this block's weights on their way to the L2, one row a thread
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(wblk + (long long)tid * k + (ST - 1) * BK),
                 "r"((KB - (ST - 1)) * BK * 2) : "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");  // x is the kernel before's output
#pragma unroll
  for (int kb = 0; kb < ST - 1; kb++) {
    if (kb < KB) load_x(kb);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  float acc[MTW][NTW][4];
#pragma unroll
  for (int i = 0; i < MTW; i++)
#pragma unroll
    for (int j = 0; j < NTW; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
  // ldmatrix addresses: A (x) lane -> row lane % 16, k half lane / 16; B (W) x4 lane -> feature (lane & 7) + 8 (lane / 16),
  // k half (lane / 8) & 1: two groups of 8 features, b0 b1 of each
  const int arow = wm * MTW * 16 + (lane & 15), acol = (lane >> 4) * 8;
  const int brow = wn * NTW * 8 + (lane & 7) + ((lane >> 4) << 3), bcol = ((lane >> 3) & 1) * 8;
  for (int kb = 0; kb < KB; kb++) {
    cp_async_wait<ST - 2>();
    __syncthreads();
    if (kb + ST - 1 < KB) {
      load_w(kb + ST - 1);
      load_x(kb + ST - 1);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    const bf16* wt = wsm + (kb % ST) * BN * LD;
    const bf16* xt = xsm + (kb % ST) * BM * LD;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t a[MTW][4], b[NTW][2];
#pragma unroll
      for (int i = 0; i < MTW; i++) ldsm_x4(a[i], xt + (arow + 16 * i) * LD + kk + acol);
#pragma unroll
      for (int j = 0; j + 1 < NTW; j += 2) {
        uint32_t r[4];
        ldsm_x4(r, wt + (brow + 8 * j) * LD + kk + bcol);
        b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
      }
      if (NTW % 2) ldsm_x2(b[NTW - 1], wt + (wn * NTW * 8 + 8 * (NTW - 1) + (lane & 7)) * LD + kk + bcol);
#pragma unroll
      for (int i = 0; i < MTW; i++)
#pragma unroll
        for (int j = 0; j < NTW; j++) mma16816(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j][0], b[j][1]);
    }
  }
  // lane (g, t): acc[i][j][0..1] row 16 (wm MTW + i) + g, features f0 + 8 (wn NTW + j) + 2t; [2..3] row + 8
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < MTW; i++)
#pragma unroll
    for (int j = 0; j < NTW; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = (wm * MTW + i) * 16 + g + 8 * h, fa = f0 + 8 * (wn * NTW + j) + 2 * t;
        if (r >= m) continue;
        if (S == 1)
          *reinterpret_cast<__nv_bfloat162*>(out + (long long)r * n + fa) =
              __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        else
          *reinterpret_cast<float2*>(ws + ((long long)blockIdx.y * m + r) * n + fa) =
              make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
  if (S > 1) last_block_sum<BN, T>(m, n, S, out, ws, tickets);
}

#define PIPE(MT, WM, WN, NTW, ST, PF)                                                                               \
  extern "C" __global__ void __launch_bounds__(32 * WM * WN) pipe_m##MT##_w##WM##x##WN##_n##NTW##_s##ST##_p##PF(  \
      const bf16* __restrict__ x, int m, const bf16* __restrict__ w, int n, int k, bf16* __restrict__ out,         \
      float* __restrict__ ws, unsigned* __restrict__ tickets) {                                                    \
    pipe<MT, WM, WN, NTW, ST, PF>(x, m, w, n, k, out, ws, tickets);                                                \
  }
// 4 stages, 4 warps; BN = 32, 48, 64 features (qkv's 4,096 and gate_up's 6,144 in 128 blocks at 32 and 48; down split in K)
#define PIPE_P(MT, WM, WN, NTW) PIPE(MT, WM, WN, NTW, 4, 0) PIPE(MT, WM, WN, NTW, 4, 1)
#define PIPE_2x2(MT) PIPE_P(MT, 2, 2, 2) PIPE_P(MT, 2, 2, 3) PIPE_P(MT, 2, 2, 4)
#define PIPE_4x1(MT) PIPE_P(MT, 4, 1, 4) PIPE_P(MT, 4, 1, 6) PIPE_P(MT, 4, 1, 8)
PIPE_2x2(2) PIPE_2x2(4) PIPE_2x2(8) PIPE_2x2(16)
PIPE_4x1(4) PIPE_4x1(8) PIPE_4x1(16)
// 8 stages: 7 k-blocks of weights in flight a block, not 3 (at 1 TB/s... 3 TB/s over 132 SMs, ~1 µs of latency wants
// ~23 KB a SM in flight; 3 stages of 32 features hold 12 KB)
#define PIPE_8(MT, WM, WN, NTW) PIPE(MT, WM, WN, NTW, 8, 0) PIPE(MT, WM, WN, NTW, 8, 1)
PIPE_8(2, 2, 2, 2) PIPE_8(4, 2, 2, 2) PIPE_8(8, 2, 2, 2) PIPE_8(4, 4, 1, 4) PIPE_8(8, 4, 1, 4)
PIPE_8(4, 4, 1, 6) PIPE_8(8, 4, 1, 6) PIPE_8(2, 2, 2, 3)
