"""Session 18: call 1's `bench_gpu.py p1b` died with an illegal memory access while building the uniform twin of the
65-128 bin (make_decode_batch(eng, 93, 1203): prefill groups of 6 prompts of 1,203 tokens). Run with
CUDA_LAUNCH_BLOCKING=1 so the error names the kernel: the twins' sequence on a fresh engine, then after P1's run."""
import os
import sys
import time
import traceback

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../.."))
sys.path.insert(0, ROOT)
from minisgl_edu import LLM, SamplingParams  # noqa: E402
from minisgl_edu.bench import anchors_workload, fresh_scheduler, make_decode_batch, release, time_steps  # noqa: E402

QWEN = os.path.join(ROOT, "benchmarks", "configs", "qwen3-0.6b")
TWINS = [(5, 1674), (45, 1463), (93, 1203), (155, 1100), (240, 1000)]


def twins(eng, label):
    pool = eng.pool
    for bs, ctx in TWINS:
        print(f"[{label}] twin bs {bs} ctx {ctx}: free pages {pool.num_free_pages}, free rows "
              f"{len(getattr(pool, 'free_rows', []))}", flush=True)
        batch = make_decode_batch(eng, bs, ctx, seed=bs)
        torch.cuda.synchronize()
        t = time_steps(lambda: eng.forward(batch), iters=5)
        release(eng, batch)
        torch.cuda.synchronize()
        print(f"[{label}]   ok, {t * 1e3:.3f} ms a step", flush=True)


def main():
    llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256)
    eng = llm.engine
    try:
        twins(eng, "fresh")
        prompts, out_lens = anchors_workload()
        params = [SamplingParams(max_tokens=o, ignore_eos=True) for o in out_lens]
        fresh_scheduler(llm, overlap=True)
        t = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        print(f"P1 run: {time.perf_counter() - t:.2f} s; scheduler deferred rows {len(llm.scheduler.deferred_rows)}", flush=True)
        twins(eng, "after P1")
    except Exception:
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
