"""Session 21: the engine's decode step with and without 8-15 rows padded to 16 in F.linear, interleaved (medians)."""
import time, statistics, torch
import torch.nn.functional as F
from minisgl_edu import LLM
from minisgl_edu.bench import make_decode_batch, release
import minisgl_edu.model.layers as L
orig = F.linear
def padded(x, w, b=None):
    n = x.shape[0]
    if x.dim() == 2 and 8 <= n < 16:
        return orig(F.pad(x, (0, 0, 0, 16 - n)), w, b)[:n]
    return orig(x, w, b)
llm = LLM(device="cpu")
eng = llm.engine
for bs in (15, 12, 9):
    b = make_decode_batch(eng, bs, 100, seed=bs)
    t = {False: [], True: []}
    for i in range(24):
        pad = i % 2 == 1
        L.F.linear = padded if pad else orig
        s = time.perf_counter(); eng.forward(b); t[pad].append(time.perf_counter() - s)
    L.F.linear = orig
    release(eng, b)
    print(bs, "plain median", round(1e3*statistics.median(t[False][2:]),1), "padded median", round(1e3*statistics.median(t[True][2:]),1), flush=True)
