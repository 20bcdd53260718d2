// Chapter 7 — y = x W^T for 2-16 rows (a decode step of a small batch) on the tensor cores, its weights in flight
// before it waits on the kernel before it (programmatic dependent launch). The model uses one shape (qk_kernel.skinny:
// one 16-row tile, NT = 1, W = 8); benchmarks/lt_probe.py --skinny times every shape built here, up to 128 rows.
// x [m, k] and W [n, k] both row-major (k contiguous), bf16 in, float accumulation, bf16 out.
// Why: at 2-256 rows cuBLAS takes ~5-7 µs for each of a decoder layer's products, whose weights alone take 1-3 µs at
// the copy rate. Measured (H100, session 34): at 16 rows four of ours in a row take 22.2 µs against cuBLAS's 24.9,
// with PDL; launched plainly 30.0. Above 16 rows ours grows with the rows where cuBLAS stays flat.
// Layout: a block owns F = 8 * NT * WARPS output features and one K slice of J chunks of 32; each warp owns NT groups
// of 8 features (NT = 2, 4 reuse each x fragment for more mmas; measured slower at every size).
// A warp loads all its weights for the slice first (J 16-byte loads a lane), then waits, then copies x's slice for
// all m rows into shared memory (cp.async), and runs mma.m16n8k16 with x's rows as the 16-row A operand and its 8
// features as B. Lane (g = lane / 4, t = lane % 4) loads k = 8t..8t+7 of a row in one 16-byte load; the mma's
// k order is a permutation of that (its k = 2t, 2t+1, 2t+8, 2t+9 take our 8t..8t+3, then 8t+4..8t+7 the second
// mma), the same for A and B, so the dot products are unchanged. With S = k / (32 J) > 1 slices, each block writes
// float partials, and the last block of a feature tile to take a ticket sums them in slice order (deterministic)
// and writes y; it sets its ticket back to 0 for the next launch (a CUDA graph replays it as is).
#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint4 ldg16(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ void mma16816(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(bf16* smem, const bf16* gmem) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

// wait until at most n of this thread's cp.async groups are pending; n is a constant once the caller's loop unrolls
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void cp_async_wait(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// With S > 1 K slices each block has written float partials ws[s][row][feature]; the last block of feature tile
// blockIdx.x (F features) to take a ticket sums them in slice order (the same sum every launch) and writes y, then sets
// its ticket back to 0 for the next launch (a CUDA graph replays it as is).
template <int F, int T>
__device__ __forceinline__ void last_block_sum(int m, int n, int S, bf16* __restrict__ out, const float* __restrict__ ws,
                                               unsigned* __restrict__ tickets) {
  __shared__ unsigned last;
  const int tid = threadIdx.x;
  __threadfence();  // the partials are visible before the ticket says so
  __syncthreads();
  if (tid == 0) last = atomicAdd(&tickets[blockIdx.x], 1u) == (unsigned)S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int c = tid; c < m * (F / 2); c += T) {
    const int r = c / (F / 2), f = blockIdx.x * F + (c - r * (F / 2)) * 2;
    float2 sum = make_float2(0.f, 0.f);
    for (int q = 0; q < S; q++) {  // slice order: the same sum every launch
      const float2 v = __ldcg(reinterpret_cast<const float2*>(ws + ((long long)q * m + r) * n + f));
      sum.x += v.x;
      sum.y += v.y;
    }
    *reinterpret_cast<__nv_bfloat162*>(out + (long long)r * n + f) = __floats2bfloat162_rn(sum.x, sum.y);
  }
  if (tid == 0) tickets[blockIdx.x] = 0;
}

// G, A (a probe, session 36; the model's shape is G = A = 1): x's slice copied in G groups of J / G chunks, the mmas
// of group q starting once it has landed while the later groups are still in flight; A accumulators a tile, chunk j
// into accumulator j % A, summed in a fixed order at the end, so a warp's mmas form A independent chains, not one.
// Why: Nsight Compute (session 36) saw the 16-row q|k|v issue an instruction every 7 cycles with 0.17 warps eligible:
// the copy, then a chain of 2 J dependent mmas, each waiting on the one before.
template <int MT, int NT, int J, int WARPS, int G = 1, int A = 1>
__device__ __forceinline__ void skinny(const bf16* __restrict__ x, int m, const bf16* __restrict__ w, int n, int k,
                                       bf16* __restrict__ out, float* __restrict__ ws, unsigned* __restrict__ tickets) {
  static_assert(J % G == 0 && G <= 4 && J % A == 0, "groups of whole chunks; at most 4 groups in flight");
  constexpr int F = 8 * NT * WARPS;  // features a block
  constexpr int KS = 32 * J;    // the block's K slice
  constexpr int ROW = KS + 32;  // shared row stride (+64 bytes: rows g and g + 1 of one phase in different banks)
  constexpr int T = 32 * WARPS;
  extern __shared__ __align__(16) bf16 xs[];  // [16 MT][ROW]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int S = gridDim.y, s = blockIdx.y;
  const int f0 = blockIdx.x * F + warp * 8 * NT, k0 = s * KS;
  uint4 wv[NT][J];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const bf16* wrow = w + (long long)(f0 + nt * 8 + g) * k + k0 + t * 8;
#pragma unroll
    for (int j = 0; j < J; j++) wv[nt][j] = ldg16(wrow + j * 32);  // every weight byte of the slice in flight
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");  // x is the kernel before's output
  constexpr int GK = KS / G, CPR = GK / 8;  // a group's K chunk; 16-byte copies a row of it
#pragma unroll
  for (int q = 0; q < G; q++) {
    for (int c = tid; c < m * CPR; c += T) {
      const int r = c / CPR, e = q * GK + (c - r * CPR) * 8;
      cp_async16(xs + r * ROW + e, x + (long long)r * k + k0 + e);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  float acc[A][MT][NT][4];
#pragma unroll
  for (int a = 0; a < A; a++)
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++) acc[a][mt][nt][0] = acc[a][mt][nt][1] = acc[a][mt][nt][2] = acc[a][mt][nt][3] = 0.f;
#pragma unroll
  for (int j = 0; j < J; j++) {
    if (j % (J / G) == 0) {  // group j / (J / G)'s rows landed: this thread's copies, then every thread's
      cp_async_wait(G - 1 - j / (J / G));
      __syncthreads();
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {  // rows >= m hold stale bytes: they only reach their own (unwritten) rows
      const uint4 xa = *reinterpret_cast<const uint4*>(xs + (mt * 16 + g) * ROW + j * 32 + t * 8);
      const uint4 xb = *reinterpret_cast<const uint4*>(xs + (mt * 16 + g + 8) * ROW + j * 32 + t * 8);
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {  // one x fragment, NT feature groups
        const uint32_t* b = reinterpret_cast<const uint32_t*>(&wv[nt][j]);
        mma16816(acc[j % A][mt][nt], xa.x, xb.x, xa.y, xb.y, b[0], b[1]);
        mma16816(acc[j % A][mt][nt], xa.z, xb.z, xa.w, xb.w, b[2], b[3]);
      }
    }
  }
#pragma unroll
  for (int a = 1; a < A; a++)  // the A chains into the first, in a fixed order
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[0][mt][nt][e] += acc[a][mt][nt][e];
  // this lane's two features of group nt: f0 + 8 nt + 2 t; acc[mt][nt][0..1] row 16 mt + g, [2..3] row 16 mt + g + 8
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = mt * 16 + g + 8 * h, fa = f0 + 8 * nt + 2 * t;
        if (r >= m) continue;
        if (S == 1)
          *reinterpret_cast<__nv_bfloat162*>(out + (long long)r * n + fa) =
              __floats2bfloat162_rn(acc[0][mt][nt][2 * h], acc[0][mt][nt][2 * h + 1]);
        else
          *reinterpret_cast<float2*>(ws + ((long long)s * m + r) * n + fa) =
              make_float2(acc[0][mt][nt][2 * h], acc[0][mt][nt][2 * h + 1]);
      }
  if (S > 1) last_block_sum<F, T>(m, n, S, out, ws, tickets);
}

#ifndef SKINNY_NO_ENTRIES  // benchmarks/kernels/pipe_gemm.cu includes the helpers above without these
// one entry point: its name, and the template's shape
#define SKINNY_ENTRY(NAME, MT, NT, J, W, G, A)                                                                    \
  extern "C" __global__ void __launch_bounds__(32 * W) NAME(                                                     \
      const bf16* __restrict__ x, int m, const bf16* __restrict__ w, int n, int k, bf16* __restrict__ out,        \
      float* __restrict__ ws, unsigned* __restrict__ tickets) {                                                   \
    skinny<MT, NT, J, W, G, A>(x, m, w, n, k, out, ws, tickets);                                                 \
  }
#define SKINNY(MT, NT, J, W) SKINNY_ENTRY(skinny_m##MT##_n##NT##_j##J##_w##W, MT, NT, J, W, 1, 1)
// NT J <= 16: a lane's weights in flight, 4 NT J registers, stay beside the MT NT 4 accumulators without spilling;
// J = 32 is the one unsplit shape for K = 1024 (no partials, no last-block sum) to time against the split ones
#define SKINNY_J(MT, W) SKINNY(MT, 1, 4, W) SKINNY(MT, 1, 8, W) SKINNY(MT, 1, 16, W) SKINNY(MT, 2, 4, W) \
  SKINNY(MT, 2, 8, W) SKINNY(MT, 4, 4, W) SKINNY(MT, 1, 32, W)
#define SKINNY_W(MT) SKINNY_J(MT, 4) SKINNY_J(MT, 8)
SKINNY_W(1) SKINNY_W(2) SKINNY_W(4) SKINNY_W(6) SKINNY_W(8)

#define SKINNY_GA(MT, J, W, G, A) SKINNY_ENTRY(skinny_m##MT##_n1_j##J##_w##W##_g##G##_a##A, MT, 1, J, W, G, A)
#define SKINNY_GA_J(MT, J) SKINNY_GA(MT, J, 8, 4, 1) SKINNY_GA(MT, J, 8, 1, 4) SKINNY_GA(MT, J, 8, 4, 4) \
  SKINNY_GA(MT, J, 8, 1, 2) SKINNY_GA(MT, J, 8, 4, 2)
#define SKINNY_GA_M(MT) SKINNY_GA_J(MT, 8) SKINNY_GA_J(MT, 16) SKINNY_GA_J(MT, 32)
SKINNY_GA_M(1) SKINNY_GA_M(2) SKINNY_GA_M(4)
#endif
