// Issue 16's L2 probe (benchmarks/lt_probe.py --l2): read a weight's bytes into the L2 ahead of the product that uses
// them, without waiting for them. One 128-byte line a thread a turn; a prefetch does not stall the thread, so the
// kernel ends once the requests are issued. mode 0: plain prefetch; 1: L2::evict_last (the line outlives streaming
// reads of normal priority, such as the attention's K/V); 2: back to normal priority once used (applypriority).
extern "C" __global__ void l2_prefetch(const char* __restrict__ p, unsigned long long bytes, int mode) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * 128ull;
  for (unsigned long long i = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * 128ull; i < bytes; i += stride) {
    if (mode == 0) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i));
    } else if (mode == 1) {
      asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p + i));
    } else {
      asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + i));
    }
  }
}
