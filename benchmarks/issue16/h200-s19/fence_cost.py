"""Session 19: what the plan fence's parts cost the host (µs per call, median of 2,000), on the GPU idle."""
import statistics
import time

import torch


def us(fn, n=2000):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(1e6 * (time.perf_counter() - t))
    return statistics.median(out)


ev = torch.cuda.Event()
ev.record()
torch.cuda.synchronize()
print(f"torch.cuda.Event()           {us(torch.cuda.Event):7.2f} us")
print(f"event.record()               {us(ev.record):7.2f} us")
torch.cuda.synchronize()
print(f"event.synchronize(), done    {us(ev.synchronize):7.2f} us")
print(f"event.query(), done          {us(ev.query):7.2f} us")
d = {}
print(f"dict.setdefault(k, Event())  {us(lambda: d.setdefault(1, torch.cuda.Event())):7.2f} us")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    print(f"record on a side stream      {us(ev.record):7.2f} us")
