"""Session 46: a host_step.py trace read back: each GPU kernel's time per step (10 steps traced), and the GPU's idle
gaps between operations (the profiler slows the host, so the gaps are larger than in an untraced run).

    python benchmarks/issue16/s46/trace_kernels.py benchmarks/issue16/s46/call3/trace_bs1.json.gz ..."""
from __future__ import annotations

import collections
import gzip
import json
import sys

STEPS = 10


def main(path: str) -> None:
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    total, count = collections.defaultdict(float), collections.Counter()
    for e in gpu:
        total[e["name"][:70]] += e["dur"]
        count[e["name"][:70]] += 1
    print(f"== {path}: {len(gpu)} GPU operations in {STEPS} steps")
    print(f"  {'us a step':>10} {'a step':>7}  kernel")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {us / STEPS:>10.1f} {count[name] / STEPS:>7.1f}  {name}")
    busy, end, gaps = 0.0, gpu[0]["ts"], 0.0
    for e in gpu:
        gaps += max(0.0, e["ts"] - end)
        busy += e["dur"]
        end = max(end, e["ts"] + e["dur"])
    print(f"  a step: span {(end - gpu[0]['ts']) / STEPS:.1f} us, busy {busy / STEPS:.1f} us, idle {gaps / STEPS:.1f} us")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
