// Chapter 7: kernel_args' KV indices in one launch. Request i of a step reads the first kv_len[i] slots of
// its page-table row; FlashInfer wants them end to end: out[cu_k[i] + p] = page_table[rows[i]][p].
// Without it: a repeat_interleave, an arange, an add and a gather (six launches and a copy) per plan.
// Built for sm_90a by scripts/build_fi_extra_kernels.sh (nvcc -cubin); launched by qk_kernel.py.
extern "C" __global__ void kv_indices(const int* __restrict__ page_table, long long width,
                                      const int* __restrict__ rows, const int* __restrict__ cu_k,
                                      int* __restrict__ out) {
  const int i = blockIdx.x;  // one block per request: its row is contiguous, so are its outputs
  const int start = cu_k[i], len = cu_k[i + 1] - start;
  const int* src = page_table + (long long)rows[i] * width;
  for (int p = threadIdx.x; p < len; p += blockDim.x) out[start + p] = src[p];
}
