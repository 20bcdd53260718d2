"""Session 21: x @ W.T for 1-32 rows over SmolLM2-like weights (q|k|v as 576 -> 1728, gate|up, down, o_proj, LM head),
float32 on this CPU, ms for the five products; then the same with one thread."""
import torch, time
torch.manual_seed(0)
shapes = [(576, 576*3//1), (576, 1536*2), (1536, 576), (576, 576), (576, 49152)]
Ws = [torch.randn(o, i) for i, o in shapes]
def t(M, reps=20):
    xs = [torch.randn(M, W.shape[1]) for W in Ws]
    for _ in range(3):
        for x, W in zip(xs, Ws): x @ W.t()
    t0 = time.perf_counter()
    for _ in range(reps):
        for x, W in zip(xs, Ws): x @ W.t()
    return (time.perf_counter() - t0) / reps * 1e3

for M in (1, 4, 8, 15, 16, 17, 32):
    print(M, round(t(M), 2), flush=True)
torch.set_num_threads(1)
print("1 thread")
for M in (1, 4, 8, 15, 16, 17, 32):
    print(M, round(t(M), 2), flush=True)
