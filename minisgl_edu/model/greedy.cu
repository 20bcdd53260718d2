// Chapter 7 (issue 16): greedy sampling in one launch. tokens[r] = argmax_v logits[r, v] as torch.argmax gives it
// (the first index among equal maxima, NaN above everything, -0.0 equal to +0.0), stored as int32 into tokens[r]
// and into the token pool at (rows[r], pos[r]), where step N+1 reads its input ids.
// Without it: torch's argmax (its reduction read the H200's logits at ~1.4 TB/s), a cast to int32, an index_put.
// Grid: (chunks, rows). Each block reduces one chunk of one row to a packed key; the row's last block to finish
// (a ticket from counter[r]) reduces the row's chunk keys, writes the token and sets counter[r] back to 0.
// Built for sm_90a by scripts/build_fi_extra_kernels.sh (nvcc -cubin); launched by qk_kernel.py.
#include <cuda_bf16.h>

// A key whose unsigned order is torch.argmax's order: the value's bits made monotone in the high word, and
// 0xffffffff - index in the low word, so that among equal values the first index is the largest key.
__device__ __forceinline__ unsigned long long key_of(float f, unsigned int idx) {
  unsigned int u = __float_as_uint(f);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // negative floats reversed, below the positive ones
  if (f == 0.0f) u = 0x80000000u;                   // -0.0 is +0.0
  if (f != f) u = 0xffffffffu;                      // NaN above every number
  return ((unsigned long long)u << 32) | (0xffffffffu - idx);
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long k) {
  for (int off = 16; off > 0; off >>= 1) {
    unsigned long long o = __shfl_xor_sync(0xffffffffu, k, off);
    k = o > k ? o : k;
  }
  return k;
}

// One value against a thread's best so far, met in increasing index order: a larger value, or a first NaN, wins;
// an equal one (-0.0 == +0.0 included) does not, so the thread keeps its first maximum. Floats, not keys: cheap.
__device__ __forceinline__ void take(float f, int i, float& best, int& at) {
  if (at < 0 || f > best || (f != f && best == best)) { best = f; at = i; }
}

extern "C" __global__ void greedy_argmax(const __nv_bfloat16* __restrict__ logits, int vocab, int chunk, int vec,
                                         unsigned long long* partial, unsigned int* counter, int* __restrict__ tokens,
                                         int* token_pool, long long pool_stride, const long long* __restrict__ rows,
                                         const long long* __restrict__ pos) {
  const int r = blockIdx.y, c = blockIdx.x, chunks = gridDim.x;
  const int begin = c * chunk, end = min(begin + chunk, vocab);
  const __nv_bfloat16* row = logits + (long long)r * vocab;
  float top = 0.0f;
  int at = -1;  // none yet
  if (vec) {  // every row 16-byte aligned (vocab % 8 == 0, an aligned base): eight values a load (chunk % 8 == 0)
    const int step = blockDim.x * 8;
    for (int i0 = begin + threadIdx.x * 8; i0 < end; i0 += 4 * step) {
      uint4 raw[4];  // four loads in flight before any compare
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (i0 + u * step < end) raw[u] = __ldcs(reinterpret_cast<const uint4*>(row + i0 + u * step));
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (i0 + u * step >= end) break;
        const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&raw[u]);
#pragma unroll
        for (int j = 0; j < 8; ++j) take(__bfloat162float(v[j]), i0 + u * step + j, top, at);
      }
    }
  } else {
    for (int i = begin + threadIdx.x; i < end; i += blockDim.x) take(__bfloat162float(row[i]), i, top, at);
  }
  unsigned long long best = at < 0 ? 0ull : key_of(top, at);  // 0: below every real key
  __shared__ unsigned long long warps[32];
  __shared__ bool last;
  best = warp_max(best);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = threadIdx.x < (blockDim.x >> 5) ? warps[threadIdx.x] : 0;
    best = warp_max(best);
    if (threadIdx.x == 0) {
      partial[(long long)r * chunks + c] = best;
      __threadfence();  // the key is visible before the ticket says so
      last = atomicAdd(&counter[r], 1u) == (unsigned)chunks - 1;
    }
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  best = 0;  // the row's last block: every chunk's key is in `partial`
  for (int i = threadIdx.x; i < chunks; i += 32) {
    unsigned long long k = __ldcg(partial + (long long)r * chunks + i);  // from L2, not a stale L1 line
    best = k > best ? k : best;
  }
  best = warp_max(best);
  if (threadIdx.x == 0) {
    const int token = (int)(0xffffffffu - (unsigned int)(best & 0xffffffffu));
    tokens[r] = token;
    if (token_pool != nullptr) token_pool[rows[r] * pool_stride + pos[r]] = token;
    counter[r] = 0;  // ready for the next launch
  }
}
