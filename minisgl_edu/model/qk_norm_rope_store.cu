// Chapter 7: one kernel for the attention block's small steps of a Llama/Qwen3 layer on bf16:
// q/k RMSNorm (Qwen3), RoPE (neox halves) for q and k, and the K/V store into the paged pool.
// Without it: q norm, k norm, RoPE and the K|V copy are four launches per layer.
// Built for sm_90a by scripts/build_fi_extra_kernels.sh (nvcc -cubin); loaded by qk_kernel.py.
#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// One warp per (token, head): heads [0, qh) are query heads, [qh, qh + kvh) key heads.
// Lane l holds elements l + 32 i of each half of the head (i < d / 64), so RoPE's pairs
// (j, j + d/2) live in one lane and nothing but the norm's sum crosses lanes.
// Every load that does not wait on another is issued first (the head, its norm weights, its V, its
// position and slot), then the cos/sin row, which waits only on the position: two memory latencies
// a warp instead of four (an H100's decode graph at 128 tokens: 4.2 us a layer before, 2.8 after).
extern "C" __global__ void qk_norm_rope_store(
    bf16* qkv, long long row_stride, int n_tokens, int qh, int kvh, int d,
    const long long* __restrict__ positions, const float* __restrict__ cos_sin,  // [max_pos, d]: cos, then sin
    const bf16* __restrict__ q_w, const bf16* __restrict__ k_w, float eps,     // q_w == nullptr: no norm (Llama)
    bf16* k_pool, bf16* v_pool, const long long* __restrict__ out_loc) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  const int heads = qh + kvh;
  if (warp >= n_tokens * heads) return;  // whole warps exit together: the shuffles below stay full
  const int t = warp / heads, h = warp % heads, half = d / 2, per = half / 32;
  const bool is_q = h < qh;
  const long long pos = positions[t], slot = is_q ? 0 : out_loc[t];
  bf16* x = qkv + t * row_stride + (long long)h * d;  // q heads, then k heads, then v heads in a row
  const bf16* w = is_q ? q_w : k_w;
  const bf16* v = x + (long long)kvh * d;  // a K head's V head, kvh heads further along the row
  float a[4], b[4], wa[4], wb[4], ss = 0.f;
  bf16 va[4], vb[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (i < per) {
      a[i] = __bfloat162float(x[lane + 32 * i]);
      b[i] = __bfloat162float(x[half + lane + 32 * i]);
      if (q_w != nullptr) {
        wa[i] = __bfloat162float(w[lane + 32 * i]);
        wb[i] = __bfloat162float(w[half + lane + 32 * i]);
      }
      if (!is_q) {
        va[i] = v[lane + 32 * i];
        vb[i] = v[half + lane + 32 * i];
      }
    }
  }
  const float* cs = cos_sin + pos * d;
  float c[4], s[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (i < per) {
      c[i] = cs[lane + 32 * i];
      s[i] = cs[half + lane + 32 * i];
    }
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
    if (i < per) ss += a[i] * a[i] + b[i] * b[i];
  if (q_w != nullptr) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float r = rsqrtf(ss / d + eps);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      if (i < per) {
        a[i] *= r * wa[i];
        b[i] *= r * wb[i];
      }
    }
  }
  bf16* dst = x;  // q: back into the q|k|v buffer, where attention reads it
  if (!is_q) dst = k_pool + slot * kvh * d + (long long)(h - qh) * d;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if (i < per) {
      const int j = lane + 32 * i;
      dst[j] = __float2bfloat16(a[i] * c[i] - b[i] * s[i]);
      dst[half + j] = __float2bfloat16(b[i] * c[i] + a[i] * s[i]);
    }
  }
  if (!is_q) {  // the V head of this K head: a plain copy into the pool
    bf16* vd = v_pool + slot * kvh * d + (long long)(h - qh) * d;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      if (i < per) {
        vd[lane + 32 * i] = va[i];
        vd[half + lane + 32 * i] = vb[i];
      }
    }
  }
}
