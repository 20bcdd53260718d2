"""Session 36: one q|k|v product (4096 x 1024 weights) at M rows through skinny_gemm.cu's shapes and cuBLAS, each
launched 3 times, for Nsight Compute to read (call3.sh runs it under ncu). Why: skinny's time grows with the rows
(4.9 us at 16, 10.3 at 64, 18.9 at 128) while cuBLAS's stays at 5.3-5.8, and neither the shared-memory reads
(skinny_t, call 2) nor the float partials (one K slice at j = 32 still takes 10.3 us at 64 rows) explain it.

    python benchmarks/issue16/s36/ncu_skinny.py M
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from lt_probe import Skinny  # noqa: E402

m = int(sys.argv[1])
dev = torch.device("cuda")
sk = Skinny(dev)
assert sk.available(), "no skinny_gemm.cubin"
n, k = 4096, 1024
w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.03
x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
ref = x.float() @ w.float().T
for nt, j, warps in ((1, 32, 8), (1, 8, 8)):  # the model's shape at q|k|v (j = 32: one K slice, no partials), and j = 8
    for _ in range(3):
        sk.mm(x, w, out, nt, j, warps, False)
    torch.cuda.synchronize()
    print(f"skinny m={m} nt={nt} j={j} w={warps}: rel err {float((out.float() - ref).norm() / ref.norm()):.1e}", flush=True)
for _ in range(3):
    torch.mm(x, w.T, out=out)
torch.cuda.synchronize()
print(f"cuBLAS m={m}: rel err {float((out.float() - ref).norm() / ref.norm()):.1e}", flush=True)
