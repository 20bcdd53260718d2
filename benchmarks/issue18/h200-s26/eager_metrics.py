"""Session 26, call 4: /metrics' `minisgl:steps_without_cuda_graph_total{phase}` on the H200 beside the step trace's
`graph: false` steps. A server whose decode graphs stop at batch 4 (`--cuda-graph-max-bs 4`) gets 16 requests at once,
so most of its decode steps run eagerly; both counts should agree, phase by phase.

    python eager_metrics.py      (writes into $OUT)
"""
import asyncio
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
from minisgl_edu.bench_serve import random_requests, run_load, start_server, stop_server  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from probe import eager_counts  # noqa: E402


def main() -> None:
    out = os.environ["OUT"]
    trace = f"{out}/trace_eager.json"
    proc, url = start_server("benchmarks/configs/smollm2-135m", "cuda", True,
                             ["--max-total-tokens", "200000", "--cuda-graph-max-bs", "4", "--trace", trace],
                             f"{out}/serve_eager.log")
    try:
        results, _ = asyncio.run(run_load(url, random_requests(16, 7, (32, 64), (16, 32)), progress=False))
        time.sleep(1.5)  # the scheduler ships its counters every 0.5 s
        counted = eager_counts(url)
    finally:
        stop_server(proc)
    ev = json.load(open(trace))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    traced = collections.Counter(e["args"]["phase"] for e in ev if e.get("name") == "forward" and
                                 e["args"].get("graph") is False)
    print(f"failed {sum(not r.ok for r in results)}; /metrics {dict(sorted(counted.items()))}; "
          f"trace graph=false {dict(sorted(traced.items()))}; agree: {counted == {k: float(v) for k, v in traced.items()}}")


if __name__ == "__main__":
    main()
