"""Issue 18: what replaying a captured step costs the host, and whether the launches after it wait.

    python benchmarks/graph_launch.py [--model DIR]

For the decode graph of 64 requests and the mixed graph (64 decode rows, 768 prompt rows): the host time of
`replay()` with the GPU idle and with the GPU still busy with the previous replay, and the host time of the
LM head's GEMM launched right after it (65 rows), against the same GEMM launched on an idle GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minisgl_edu import LLM  # noqa: E402


def host_us(fn, reps: int = 50, busy=None) -> float:
    """Median host microseconds of fn(); busy() first (unsynchronized) keeps the GPU working meanwhile."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        if busy is not None:
            busy()
        t0 = time.perf_counter()
        fn()
        out.append(1e6 * (time.perf_counter() - t0))
    torch.cuda.synchronize()
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(Path(__file__).resolve().parents[1] / "benchmarks/configs/smollm2-135m"))
    args = ap.parse_args()
    llm = LLM(args.model, dummy_weights=True)
    eng = llm.engine
    gr = eng.graphs
    head = eng.model.lm_head.weight if hasattr(eng.model, "lm_head") else None
    h = torch.randn(65, eng.model_config.hidden_size, dtype=eng.dtype, device=eng.device)
    logits = lambda: eng.model.logits(h)
    spin = torch.randn(4096, 4096, dtype=eng.dtype, device=eng.device)
    busy = lambda: [spin @ spin for _ in range(8)]  # ~1 ms of GPU work queued ahead
    print(f"{args.model}: host microseconds (median of 50)")
    print(f"  LM head GEMM (65 rows), GPU idle: {host_us(logits):8.1f}   GPU busy: {host_us(logits, busy=busy):8.1f}")
    with torch.inference_mode():
        for name, g in (("decode graph bs 64", gr.graphs[64]), ("mixed graph (64, 768)", gr.prefill_graphs[64, 768]),
                        ("decode graph bs 1", gr.graphs[1])):
            print(f"  {name:24s} replay, GPU idle: {host_us(g.replay):8.1f}   GPU busy: {host_us(g.replay, busy=busy):8.1f}"
                  f"   then the LM head: {host_us(logits, busy=g.replay):8.1f}")
    del head


if __name__ == "__main__":
    main()
