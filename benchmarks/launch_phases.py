"""Issue 18: what a step costs the host, and where: a graph's replay, the LM head, and each phase of a launch.

    python benchmarks/launch_phases.py [--model DIR] [--ops]

For the decode graph of 64 requests and the mixed graph (64 decode rows, 768 prompt rows): the host time of
`replay()` with the GPU idle and with the GPU still busy with the previous replay, and the host time of the
LM head's GEMM launched right after it (65 rows), against the same GEMM launched on an idle GPU. Then
every phase of a real decode step and a real mixed step timed around its call (`in_engine`), with the default
code, with the graphs' wrappers planned the other way (`LEAN_PLAN`: FlashInfer's plan() or its host planner alone),
and with kernel_args' PyTorch gather (the twin). With --ops, the
host's tensor operations of those steps, counted and timed by torch.profiler (`host_ops`).
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
    ap.add_argument("--ops", action="store_true", help="then count and time the host's tensor operations per step")
    ap.add_argument("--fence-ab", action="store_true",
                    help="only the plan fence on and off, in the order on, off, off, on (GPU idle, then busy if asked)")
    ap.add_argument("--busy-ms", type=float, default=0.0,
                    help="then time the phases again with the GPU busy: this many ms of sleep kernel queued on the "
                         "engine stream before each step, the step launched from the overlap loop's stream (a launch "
                         "that waits for the GPU anywhere takes at least this long)")
    args = ap.parse_args()
    llm = LLM(args.model, dummy_weights=True)
    eng = llm.engine
    gr = eng.graphs
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
    in_engine(llm, fence_ab=args.fence_ab)
    if args.busy_ms > 0:
        in_engine(llm, busy_ms=args.busy_ms, fence_ab=args.fence_ab)
    if args.ops:
        host_ops(llm)


def in_engine(llm, steps: int = 20, busy_ms: float = 0.0, fence_ab: bool = False) -> None:
    """Where a step's host time goes, inside real scheduler steps (64 decoding requests; in the mixed run a
    561-token prompt joins every step): each phase timed around its call, summed per step, medians in us.
    busy_ms > 0: each step is launched as the overlap loop launches it, behind that much queued GPU work."""
    import itertools

    import flashinfer

    import minisgl_edu.attention.base as base_mod
    import minisgl_edu.attention.flashinfer as fib
    import minisgl_edu.engine as engine_mod
    from minisgl_edu.bench import fresh_scheduler
    eng, step_times, undo = llm.engine, {}, []
    sched = fresh_scheduler(llm, overlap=busy_ms > 0)

    def wrap(owner, attr, name):  # name: a label, or a function of the call's keywords giving one
        real = getattr(owner, attr)
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                label = name(k) if callable(name) else name
                step_times[label] = step_times.get(label, 0.0) + 1e6 * (time.perf_counter() - t0)
        setattr(owner, attr, call)
        undo.append((owner, attr, real))
    for owner, attr, name in [(sched, "schedule", "schedule"), (sched, "launch", "launch"),
                              (sched.pool, "assign_locations", " assign_locations"), (eng, "forward", " forward"),
                              (eng, "prepare", "  prepare"), (engine_mod, "step_layout", "   step_layout"),
                              (eng.backend, "prepare", "   backend.prepare"), (fib, "kernel_args", "    kernel_args"),
                              (base_mod, "kernel_args", "    kernel_args"),
                              (flashinfer.BatchPrefillWithPagedKVCacheWrapper, "plan", "    FlashInfer prefill plan"),
                              (flashinfer.BatchDecodeWithPagedKVCacheWrapper, "plan", "    FlashInfer decode plan"),
                              (fib, "lean_plan", lambda k: f"    lean {'prefill' if k.get('prefill') else 'decode'} plan"),
                              (eng.graphs, "replay", "  replay"), (eng.graphs, "replay_prefill", "  replay_prefill"),
                              (eng.sampling_cache, "get", "  sampling tensors"), (eng.model, "logits", "  LM head"),
                              (engine_mod, "sample", "  sample")]:
        wrap(owner, attr, name)
    uids, g = itertools.count(), torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, 10000, (n,), generator=g).tolist()
    import minisgl_edu.attention.metadata as md
    gather = md.gather_slots
    lean, fence = fib.LEAN_PLAN, fib.PLAN_FENCE
    try:  # the default, then the graphs' wrappers planned the other way (LEAN_PLAN), then kernel_args' PyTorch gather,
        # then without the plan fence (what its event record and wait cost the host)
        variants = [(f"the defaults (LEAN_PLAN {lean}, our kv_indices kernel, PLAN_FENCE {fence})", lean, False, fence),
                    (f"LEAN_PLAN {not lean}", not lean, False, fence),
                    ("kernel_args' slots by the PyTorch gather (the twin)", lean, True, fence),
                    (f"PLAN_FENCE {not fence}", lean, False, not fence)]
        if fence_ab:  # the fence alone, on and off in ABBA order (an order effect cancels)
            variants = [variants[i] for i in (0, 3, 3, 0)]
        for variant, lean_on, twin, fence_on in variants:
            fib.LEAN_PLAN, fib.PLAN_FENCE = lean_on, fence_on
            md.gather_slots = (lambda *a: None) if twin else gather
            print(f"  {variant}" + (f", the GPU busy for {busy_ms} ms before each step" if busy_ms else ""))
            run_phases(sched, steps, step_times, uids, ids, busy_ms)
    finally:
        md.gather_slots, fib.LEAN_PLAN, fib.PLAN_FENCE = gather, lean, fence
        for owner, attr, real in reversed(undo):
            setattr(owner, attr, real)


def run_phases(sched, steps, step_times, uids, ids, busy_ms: float = 0.0) -> None:
    """64 requests decoding: `steps` decode steps, then `steps` mixed ones; the medians of each phase."""
    from contextlib import nullcontext

    from minisgl_edu import SamplingParams
    eng = sched.engine
    for _ in range(64):
        sched.add_request(next(uids), ids(600), SamplingParams(max_tokens=4 * steps, ignore_eos=True))
    while sched.pending:
        sched.step()
    if sched.in_flight is not None:  # the overlap loop's last step: processed before the steps timed one by one
        (batch, host, _), sched.in_flight = sched.in_flight, None
        torch.cuda.synchronize()
        for row in sched.deferred_rows:
            sched.pool.release_row(row)
        sched.deferred_rows.clear()
        sched.process(batch, host.tolist())
    for phase in ("decode", "mixed"):
        per = {}
        for _ in range(steps):
            if phase == "mixed":
                sched.add_request(next(uids), ids(561), SamplingParams(max_tokens=1, ignore_eos=True))
            torch.cuda.synchronize()
            if busy_ms:  # the previous step still running on the GPU, as in the overlap loop (~2 GHz clock)
                with torch.cuda.stream(eng.stream):
                    torch.cuda._sleep(int(busy_ms * 2e6))
            step_times.clear()
            t0 = time.perf_counter()
            with torch.cuda.stream(sched.stream) if busy_ms else nullcontext():
                batch = sched.schedule()
                tokens = sched.launch(batch)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            step_times["step, synchronized"] = 1e6 * (time.perf_counter() - t0)
            step_times["schedule + launch"] = 1e6 * (t1 - t0)
            sched.process(batch, tokens.tolist())
            for k, v in step_times.items():
                per.setdefault(k, []).append(v)
        print(f"  {phase} steps (64 decoding{' + a 561-token prompt' if phase == 'mixed' else ''}), host us, "
              f"median of {steps}:")
        for k, v in per.items():
            print(f"    {k:32s} {statistics.median(v):8.1f}")
    while not sched.idle:
        sched.step()


def host_ops(llm, steps: int = 20) -> None:
    """The aten operations a decode step and a mixed step issue on the host (schedule + launch, GPU idle before
    each step): calls per step and self CPU us per step, largest first, from torch.profiler (CPU activity only)."""
    import itertools

    from torch.profiler import ProfilerActivity, profile

    from minisgl_edu import SamplingParams
    from minisgl_edu.bench import fresh_scheduler
    sched = fresh_scheduler(llm, overlap=False)
    uids, g = itertools.count(), torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(0, 10000, (n,), generator=g).tolist()
    for _ in range(64):
        sched.add_request(next(uids), ids(600), SamplingParams(max_tokens=4 * steps, ignore_eos=True))
    while sched.pending:
        sched.step()
    for phase in ("decode", "mixed"):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                if phase == "mixed":
                    sched.add_request(next(uids), ids(561), SamplingParams(max_tokens=1, ignore_eos=True))
                torch.cuda.synchronize()
                batch = sched.schedule()
                tokens = sched.launch(batch)
                torch.cuda.synchronize()
                sched.process(batch, tokens.tolist())
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        top = [e for e in rows if e.count >= steps][:25]
        print(f"  host ops of a {phase} step (per step, from {steps} steps; self CPU us incl. profiler overhead):")
        print(f"    {sum(e.count for e in rows if not e.key.startswith('cuda')) / steps:7.1f} aten/cuda calls in all")
        for e in top:
            print(f"    {e.key[:44]:44s} {e.count / steps:6.1f} calls {e.self_cpu_time_total / steps:8.1f} us")
    while not sched.idle:
        sched.step()


if __name__ == "__main__":
    main()
