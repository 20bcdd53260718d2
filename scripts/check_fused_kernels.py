import torch, os
os.environ["FLASHINFER_DISABLE_JIT"] = "1"
from minisgl_edu.model.layers import fused_kernels, RMSNorm, silu_and_mul, RotaryEmbedding
from transformers import Qwen3Config
x = torch.randn(7, 1024, device="cuda", dtype=torch.bfloat16)
fi = fused_kernels(x); print("fused:", fi is not None, "| float32 falls back:", fused_kernels(x.float()) is None)
n = RMSNorm(1024, 1e-6).cuda().to(torch.bfloat16); n.weight.data.normal_()
ref = (n.weight.float() * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)))
print("rmsnorm max err", (n(x).float() - ref).abs().max().item())
g = torch.randn(7, 2 * 3072, device="cuda", dtype=torch.bfloat16)
a, b = g.float().chunk(2, -1)
print("silu_and_mul max err", (silu_and_mul(g).float() - torch.nn.functional.silu(a) * b).abs().max().item())
cfg = Qwen3Config(head_dim=128, rope_theta=1e6)
rope = RotaryEmbedding(cfg, 128, 4096).cuda()
q = torch.randn(7, 16, 128, device="cuda", dtype=torch.bfloat16); k = torch.randn(7, 8, 128, device="cuda", dtype=torch.bfloat16)
pos = torch.tensor([0, 1, 5, 100, 1000, 2000, 4000], device="cuda")
q1, k1 = rope(pos, q.clone(), k.clone())
from minisgl_edu.model.layers import use_kernels; use_kernels(fused=False)  # as EngineConfig(fused_kernels=False)
q2, k2 = rope(pos, q.clone(), k.clone())
print("rope max err", (q1.float() - q2.float()).abs().max().item(), (k1.float() - k2.float()).abs().max().item())
