"""Measuring the engine (chapters 6 and 7): workloads, the memory floor, and step timelines.

A decode step reads every weight and the K/V of every running request at least once, so
floor = (weight bytes + KV bytes read) / copy bandwidth, measured on the same device in the same run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .req import Batch, Req, SamplingParams
from .trace import StepTime, Timeline


def anchors_workload(n: int = 256, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """The anchors' offline workload as (prompts, output lengths): the serving benchmark's random dataset at its
    default ranges (`bench_serve.random_requests`: lengths in [100, 1024], ids in [0, 10000], one seeded RNG)."""
    from .bench_serve import random_requests
    reqs = random_requests(n, seed)
    return [r.prompt for r in reqs], [r.output_len for r in reqs]


def copy_bandwidth(device: torch.device | str = "cuda", nbytes: int = 2 << 30, iters: int = 10) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read + bytes written (`iters` copies back to back)."""
    x = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()  # not zeros
    y = torch.empty_like(x)
    seconds = time_steps(lambda: y.copy_(x), iters, warmup=1, sync=lambda: torch.cuda.synchronize(device))
    del x, y
    torch.cuda.empty_cache()  # give the 4 GiB back: the KV pool is sized from free memory
    return 2 * nbytes / seconds


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of every distinct parameter (a tied embedding / LM head counts once: it is read once, by the head)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def kv_bytes_per_token(engine) -> int:
    return engine.kv.bytes_per_token  # K and V, every layer


def decode_floor_s(prompt_lens: list[int], output_lens: list[int], w_bytes: int, kv_tok: int, bw: float) -> float:
    """Memory floor of every decode step of a workload run all at once: the step that produces output
    token j (j >= 2; token 1 comes from the prefill) reads the weights and, for each request still
    running, the K/V of its prompt_len + j - 1 positions."""
    total = 0
    for j in range(2, max(output_lens) + 1):
        kv_tokens = sum(p + j - 1 for p, o in zip(prompt_lens, output_lens) if o >= j)
        total += w_bytes + kv_tokens * kv_tok
    return total / bw


@dataclass
class TimelineStats:
    steps: int
    gpu_busy_s: float
    gpu_span_s: float
    idle_share: float  # share of the span (first step start .. last step end) with no step on the GPU
    step_gpu_ms: list[float]
    gap_ms: list[float]  # GPU idle before each step (after the first)


def gaps_and_idle_share(steps_ms: list[tuple[float, float]]) -> tuple[list[float], float]:
    """GPU steps as (start, end) in ms -> (the gap before each step after the first, idle share):
    the gaps summed over the span from the first start to the last end."""
    gaps = [max(0.0, b[0] - a[1]) for a, b in zip(steps_ms, steps_ms[1:])]
    span = steps_ms[-1][1] - steps_ms[0][0]
    return gaps, (sum(gaps) / span if span > 0 else 0.0)


def timeline_stats(timeline: Timeline, first: int = 0) -> TimelineStats:
    """The device times of Engine.timeline's steps from `first` on (it waits for them)."""
    steps = [(t.device_start * 1e3, t.device_end * 1e3) for t in timeline.steps(first)]  # ms
    gaps, idle = gaps_and_idle_share(steps)
    span = steps[-1][1] - steps[0][0]
    return TimelineStats(len(steps), sum(e - s for s, e in steps) / 1e3, span / 1e3, idle, [e - s for s, e in steps], gaps)


def aligned_timeline(timeline: Timeline, first: int = 0) -> list[StepTime]:
    """Engine.timeline's steps from `first` on, every time in seconds from that step's CPU start (for plots)."""
    steps = timeline.steps(first)
    return [StepTime(*(t - steps[0].cpu_start for t in step)) for step in steps]


def time_steps(fn, iters: int = 50, warmup: int = 5, sync=None) -> float:
    """Seconds per call of `fn` back to back (CPU launch costs included), one synchronize at the end."""
    sync = sync or (torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None))
    for _ in range(warmup):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t) / iters


# ---- running workloads on an existing engine ---------------------------------------------------
def fresh_scheduler(llm, overlap: bool, tracer=None):
    """A new scheduler over the same engine (and a step `Tracer`, if given); the old cache's pages go back first."""
    old = llm.scheduler
    llm.engine.pool.free(old.cache.evict(old.cache.evictable_size))
    from dataclasses import replace

    from .scheduler import Scheduler
    llm.scheduler = Scheduler(llm.engine, replace(old.cfg, cache="radix", overlap=overlap), tuple(old.eos), tracer)
    return llm.scheduler


def make_decode_batch(engine, bs: int, ctx: int, seed: int) -> Batch:
    """bs requests with ctx-token prompts, prefilled through the engine; return their first decode batch."""
    g = torch.Generator().manual_seed(seed)
    pool = engine.pool
    reqs = []
    for i in range(bs):
        r = Req(10_000 + i, torch.randint(0, min(10000, engine.vocab_size), (ctx,), generator=g).tolist(), SamplingParams(max_tokens=64))
        r.table_idx, r.device_len = pool.take_row(), ctx
        pool.token_pool[r.table_idx, :ctx] = torch.tensor(r.token_ids, dtype=torch.int32)
        reqs.append(r)
    per = max(1, 8192 // ctx)
    for i in range(0, bs, per):  # prefill in token-budget-sized groups
        b = Batch(reqs[i:i + per], "prefill")
        b.out_loc = pool.assign_locations(b.reqs)
        engine.forward(b)
    for r in reqs:
        r.complete_one()
    batch = Batch(reqs, "decode")
    batch.out_loc = pool.assign_locations(reqs)
    return batch


def release(engine, batch: Batch) -> None:
    for r in batch.reqs:  # make_decode_batch assigned the decode step's slots: they reach device_len
        engine.pool.free_tail(r, 0, in_step=True)
        engine.pool.release_row(r.table_idx)


def first_decode(stats) -> int:
    """Index of the first decode step in Scheduler.stats (the timeline has one entry per step too)."""
    return next(i for i, s in enumerate(stats) if s.phase == "decode")


# ---- the command line (chapter 9): python -m minisgl_edu.bench serve | offline | compare ---------
def main(argv=None) -> int:
    """The serving benchmark's CLI; it lives in bench_serve.py (this module stays the offline helpers)."""
    from .bench_serve import main as cli
    return cli(argv)


if __name__ == "__main__":
    raise SystemExit(main())
