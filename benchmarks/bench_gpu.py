"""GPU benchmarks P1-P4 on the Qwen3-0.6B architecture with dummy weights (bf16).

    python benchmarks/bench_gpu.py [p1] [p2] [p4] [p2x] [pf] [tokens] [--baseline hf]

P1  offline throughput on the anchors' workload, next to its memory floor
P2  decode step time at batch 1, 8, 64, 256 (context ~1k), eager vs CUDA graph, next to the floor
    (P3 is the same table read at batch 1: graph vs eager and vs floor)
P4  overlap scheduling on vs off at batch 64: throughput and GPU idle share between steps
P2x an experiment: P2 at batch 1 and 256 with RMSNorm swapped for torch's fused rms_norm
LEAN  decode step and host time at batch 1, 8, 256 with lean_step off vs on, then P1 with it off
GEMM  an experiment: the layer's four GEMMs at M = 1, 8, 64 via cuBLAS, cuBLASLt, a pre-transposed weight
SPLITK an experiment: the layer's four products at 16..256 rows, cuBLAS against split-K by hand (bmm + sum)
LT  an experiment: cuBLASLt for the GEMMs (kernels per layer, decode at batch 1 and 256, P1); after the others
SMALLM an experiment: our kernels at <= 8 rows (o_proj; SiLU-and-mul + down) (kernels per layer, decode at 1 and 8, P1)
TC  an experiment: every decode graph through FlashInfer's tensor-core decode kernel (decode at 1, 64, 256, P1)
NOBAL the naive twin of the balanced decode choice: the CUDA-core kernel for every decode step (decode at 256, P1)
LEANBAL an experiment: LEAN_PLAN on, then also the balanced kernel's KV threshold at 0 (decode at 64 and 256, P1 each)
NOSPLIT an experiment: decode graphs padded past FlashInfer's partition-KV sizes (P2 at 64-128, P1)
FREE bounds: P2 and P1 with the small kernels, the products, or both skipped (what fusion could at best save)
PAGEDP1 P1 with page_size 16, FlashInfer pages on / off, alternated twice
PAGED an experiment: page_size 16 (FlashInfer reads pages), then also the tensor-core kernel for even steps (P2, P1 each)
TCWHOLE an experiment: the balanced graphs split, unsplit with spares on request 0, on a spare lane, over pages of 16
TCPAIR TC_WHOLE's twin beside it (P2 at 192 and 256, P1 each)
HEADPAIR graph_head off / on / off / on, one engine each: P2 at 1, 8, 64, 256 with the host's own work, then P1
P1B where P1's time goes: decode steps against their own floors by batch size, prefill / mixed apart
PF  prefill of the anchors' 256 prompts against its compute floor (bf16 matmul rate measured in the run)
tokens  greedy tokens with the fused kernels on vs off over P4's 64-request workload

Each prints a table, appends rows to benchmarks/results.json and rewrites benchmarks/RESULTS.md's
generated table (the text around it is kept).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minisgl_edu import LLM, SamplingParams  # noqa: E402
from minisgl_edu.bench import (anchors_workload, copy_bandwidth, decode_floor_s, first_decode,  # noqa: E402
                               fresh_scheduler, kv_bytes_per_token, make_decode_batch, release, time_steps,
                               timeline_stats, weight_bytes)
from minisgl_edu.req import Batch  # noqa: E402
from minisgl_edu.trace import Timeline  # noqa: E402

QWEN = str(ROOT / "benchmarks" / "configs" / "qwen3-0.6b")
RESULTS = ROOT / "benchmarks" / "results.json"
BREAKDOWN = "p1b" in sys.argv  # an experiment's P1 is broken down too
HF_MEASURED = 670.0  # tok/s: transformers generate, one padded batch of all 256 requests, on the H200 (issue 4)


def commit() -> str:
    c = os.environ.get("MINISGL_COMMIT")
    if c:
        return c
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True).strip()
    except Exception:
        return "unknown"


def hardware() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


ROWS: list[dict] = []


def record(metric: str, value: float, unit: str, ratio: float | None = None, note: str = "") -> None:
    row = dict(metric=metric, value=round(value, 4), unit=unit, ratio=None if ratio is None else round(ratio, 3),
               hardware=hardware(), date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               commit=commit(), command="python benchmarks/bench_gpu.py " + " ".join(sys.argv[1:]), note=note)
    ROWS.append(row)
    print(f"  {metric:<40s} {value:>12.4g} {unit:<8s} ratio={row['ratio']}  {note}", flush=True)


# ---- P1 -----------------------------------------------------------------------------------------
def p1(llm: LLM, bw: float, tag: str = "") -> None:
    print(f"\nP1{tag} offline throughput, anchors' workload (256 requests, ignore_eos)", flush=True)
    prompts, out_lens = anchors_workload()
    params = [SamplingParams(max_tokens=o, ignore_eos=True) for o in out_lens]
    llm.generate(prompts[:8], SamplingParams(max_tokens=32, ignore_eos=True), use_tqdm=False)  # warm-up
    fresh_scheduler(llm, overlap=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    tokens = sum(len(o["token_ids"]) for o in outs)
    assert tokens == sum(out_lens) == 133966, tokens
    eng = llm.engine
    floor = decode_floor_s([len(p) for p in prompts], out_lens, weight_bytes(eng.model), kv_bytes_per_token(eng), bw)
    steps = llm.scheduler.stats
    record(f"p1{tag}_offline_throughput", tokens / dt, "tok/s", (tokens / dt) / (tokens / floor),
           f"{tokens} tokens in {dt:.2f} s; ratio = share of the memory floor's throughput; "
           f"{sum(s.phase == 'prefill' for s in steps)} prefill + {sum(s.phase == 'decode' for s in steps)} decode steps")
    if tag:
        return
    record("p1_memory_floor", tokens / floor, "tok/s", None, f"{floor:.2f} s at {bw / 1e12:.2f} TB/s copy bandwidth")
    record("p1_vs_transformers", (tokens / dt) / HF_MEASURED, "x", None,
           f"against {HF_MEASURED:.0f} tok/s measured earlier on the H200 (not re-run: --baseline hf)")


def p1_breakdown(llm: LLM, bw: float, tag: str = "") -> None:
    """Where P1's time goes: the same run with a step timeline, each decode step's device time beside its own floor
    (weights + the K/V of every request's device_len), binned by batch size, and the prefill / mixed steps apart.
    Each bin's uniform twin (its batch size at its mean context, P2's way) separates uneven contexts from size."""
    from minisgl_edu import trace
    print(f"\nP1B{tag} where P1's time goes (one more P1 run, with a step timeline)", flush=True)
    prompts, out_lens = anchors_workload()
    params = [SamplingParams(max_tokens=o, ignore_eos=True) for o in out_lens]
    eng = llm.engine
    w, kvt = weight_bytes(eng.model), kv_bytes_per_token(eng)
    of, kv_read = trace.StepStats.__dict__["of"], []
    trace.StepStats.of = classmethod(lambda cls, b: kv_read.append((sum(r.device_len for r in b.reqs),
                                                                    max(r.device_len for r in b.reqs))) or of.__func__(cls, b))
    try:
        sched = fresh_scheduler(llm, overlap=True)
        eng.timeline = Timeline(eng.device)
        torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
        steps = eng.timeline.steps()
    finally:
        trace.StepStats.of, eng.timeline = of, None
    stats = list(sched.stats)
    assert len(steps) == len(stats) == len(kv_read), (len(steps), len(stats), len(kv_read))
    gpu = [(s.device_end - s.device_start) * 1e3 for s in steps]
    busy = sum(gpu) / 1e3
    record(f"p1b{tag}_wall", wall, "s", None, f"{len(stats)} steps; GPU busy {busy:.2f} s = {busy / wall:.1%} of the wall")
    for phase in ("prefill", "mixed"):
        ms = [g for g, s in zip(gpu, stats) if s.phase == phase]
        if ms:
            record(f"p1b{tag}_{phase}_steps_s", sum(ms) / 1e3, "s", None,
                   f"{len(ms)} {phase} steps, {sum(s.tokens for s in stats if s.phase == phase)} tokens")
    bins = [(1, 16), (17, 64), (65, 128), (129, 192), (193, 256)]
    print(f"  {'batch':>9} {'steps':>6} {'GPU s':>7} {'floor s':>8} {'ratio':>6} {'max/mean ctx':>13} "
          f"{'uniform ratio':>14}", flush=True)
    tot_g = tot_f = 0.0
    for lo, hi in bins:
        sel = [(g, s, kv) for g, s, kv in zip(gpu, stats, kv_read) if s.phase == "decode" and lo <= s.batch_size <= hi]
        if not sel:
            continue
        g_s = sum(g for g, _, _ in sel) / 1e3
        f_s = sum(w + kv[0] * kvt for _, _, kv in sel) / bw
        tot_g, tot_f = tot_g + g_s, tot_f + f_s
        spread = float(np.mean([kv[1] * s.batch_size / kv[0] for _, s, kv in sel]))
        bs = int(np.median([s.batch_size for _, s, _ in sel]))
        ctx = int(np.mean([kv[0] / s.batch_size for _, s, kv in sel]))
        batch = make_decode_batch(eng, bs, ctx, seed=bs)
        uni = time_steps(lambda: eng.forward(batch), iters=30) / ((w + bs * (ctx + 1) * kvt) / bw)
        release(eng, batch)
        record(f"p1b{tag}_decode_bs{lo}_{hi}", g_s / f_s, "x", None,
               f"{len(sel)} decode steps: GPU {g_s:.3f} s against a floor of {f_s:.3f} s; max/mean context {spread:.2f}; "
               f"a uniform batch of {bs} at context {ctx}: {uni:.2f} x its floor")
        print(f"  {lo:>4}-{hi:<4} {len(sel):>6} {g_s:>7.3f} {f_s:>8.3f} {g_s / f_s:>6.2f} {spread:>13.2f} {uni:>14.2f}", flush=True)
    record(f"p1b{tag}_decode_steps", tot_g / tot_f, "x", None,
           f"every decode step: GPU {tot_g:.3f} s against its floor {tot_f:.3f} s; the wall beyond the GPU's busy time: "
           f"{wall - busy:.3f} s")


def p1_hf_baseline() -> None:
    """transformers generate, one padded static batch of all 256 requests (~200 s on the H200)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    prompts, out_lens = anchors_workload()
    cfg = AutoConfig.from_pretrained(QWEN)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).cuda().eval()
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), 0, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):  # left padding
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    t = time.perf_counter()
    with torch.no_grad():
        model.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=max(out_lens), min_new_tokens=max(out_lens),
                       do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    record("p1_transformers_baseline", sum(out_lens) / dt, "tok/s", None,
           f"useful tokens {sum(out_lens)} in {dt:.1f} s (padded batch runs to the longest output)")


# ---- P2 / P3 ------------------------------------------------------------------------------------
def count_kernels(eng, batch: Batch) -> None:
    """GPU operations one eager decode step launches (why a graph still costs GPU time: many tiny kernels)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        eng.forward(batch)
        torch.cuda.synchronize()
    n = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    layers = eng.model_config.num_hidden_layers
    record("p3_gpu_ops_per_decode_step", n, "ops", None, f"{n / layers:.0f} per layer ({layers} layers), eager, batch 1")


def p2(llm: LLM, bw: float) -> None:
    print("\nP2/P3 decode step time, context ~1k, eager vs CUDA graph", flush=True)
    eng = llm.engine
    fresh_scheduler(llm, overlap=True)
    w, kvt, ctx = weight_bytes(eng.model), kv_bytes_per_token(eng), 1024
    graphs = eng.graphs
    table = []
    for bs in (1, 8, 64, 256):
        batch = make_decode_batch(eng, bs, ctx, seed=bs)
        floor = (w + bs * (ctx + 1) * kvt) / bw
        eng.graphs = None
        eager = time_steps(lambda: eng.forward(batch), iters=30)
        if bs == 1:
            count_kernels(eng, batch)
        eng.graphs = graphs
        graph = time_steps(lambda: eng.forward(batch), iters=100)
        eng.timeline = Timeline(eng.device)  # CPU time of each graph step: is the step bound by the host?
        time_steps(lambda: eng.forward(batch), iters=30)
        cpu = float(np.median([t1 - t0 for t0, t1, _, _ in list(eng.timeline.entries)[5:]]))
        span = float(np.median([s.device_end - s.device_start for s in eng.timeline.steps(5)]))
        eng.timeline = None
        alone = host_alone(eng, batch)
        record(f"p2_decode_step_bs{bs}_graph_cpu", cpu * 1e3, "ms", cpu / graph,
               "median CPU time of Engine._forward per graph step (prepare, plan, replay, sampling launches), back "
               "to back; it includes the plan fence's wait for the GPU; ratio = CPU time / step time")
        record(f"p2_decode_step_bs{bs}_host_alone", alone * 1e3, "ms", alone / graph,
               "median CPU time of Engine._forward with the GPU idle when it starts (a synchronize after each step): "
               "the host's own work, no waits; ratio = / step time (near or above 1: the step is bound by the host)")
        record(f"p2_decode_step_bs{bs}_device_span", span * 1e3, "ms", span / graph,
               "median GPU time from a step's first operation to its last, back to back (replay, LM head, sampling, "
               "copies, and any wait for the host's launches inside the step); ratio = / step time")
        g = graphs.graphs[graphs.padded_size(bs)]  # the replay alone: GPU time of the captured forward
        replay = time_steps(g.replay, iters=100)
        release(eng, batch)
        table.append((bs, eager, graph, floor))
        record(f"p2_graph_replay_only_bs{bs}", replay * 1e3, "ms", replay / floor,
               "the captured forward alone (no metadata, plan; with graph_head, session 47 on, its LM head and greedy "
               "argmax too); ratio = time / floor")
        record(f"p2_decode_step_bs{bs}_eager", eager * 1e3, "ms", eager / floor, "ratio = time / memory floor")
        record(f"p2_decode_step_bs{bs}_graph", graph * 1e3, "ms", graph / floor, "ratio = time / memory floor")
        record(f"p2_decode_floor_bs{bs}", floor * 1e3, "ms", None, f"(weights {w / 1e9:.2f} GB + KV) / {bw / 1e12:.2f} TB/s")
    bs1 = table[0]
    record("p3_bs1_graph_speedup_vs_eager", bs1[1] / bs1[2], "x", None, "eager step time / graph step time at batch 1")
    print(f"\n  {'bs':>4} {'eager ms':>10} {'graph ms':>10} {'floor ms':>10} {'graph/floor':>12} {'eager/graph':>12}")
    for bs, e, g, f in table:
        print(f"  {bs:>4} {e * 1e3:>10.3f} {g * 1e3:>10.3f} {f * 1e3:>10.3f} {g / f:>12.2f} {e / g:>12.2f}")


# ---- P4 -----------------------------------------------------------------------------------------
def p4(llm: LLM) -> None:
    print("\nP4 overlap scheduling on vs off, batch 64 (512-token prompts, 512 output tokens)", flush=True)
    import random
    rnd = random.Random(4)
    prompts = [[rnd.randint(0, 10000) for _ in range(512)] for _ in range(64)]
    params = SamplingParams(max_tokens=512, ignore_eos=True)
    res = {}
    for overlap in (False, True, False, True):  # twice each: the second pair is the one reported
        sched = fresh_scheduler(llm, overlap)
        llm.engine.timeline = Timeline(llm.engine.device)
        torch.cuda.synchronize()
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        st = timeline_stats(llm.engine.timeline, first_decode(sched.stats))
        res[overlap] = (sum(len(o["token_ids"]) for o in outs) / dt, st, dt)
        llm.engine.timeline = None
    (off, st_off, _), (on, st_on, _) = res[False], res[True]
    record("p4_throughput_overlap_off", off, "tok/s", None, f"GPU idle share {st_off.idle_share:.1%}")
    record("p4_throughput_overlap_on", on, "tok/s", on / off, "ratio = on / off")
    record("p4_gpu_idle_share_overlap_off", 100 * st_off.idle_share, "%", None,
           f"median gap {np.median(st_off.gap_ms) * 1e3:.0f} us, median step {np.median(st_off.step_gpu_ms):.3f} ms")
    record("p4_gpu_idle_share_overlap_on", 100 * st_on.idle_share, "%", None,
           f"median gap {np.median(st_on.gap_ms) * 1e3:.0f} us, median step {np.median(st_on.step_gpu_ms):.3f} ms")


# ---- prefill vs its compute floor (issue 16) ------------------------------------------------------
def matmul_rate(n: int = 8192, iters: int = 10) -> float:
    """bf16 FLOP/s of an n×n×n product on random data (mean of `iters` after 3 warm-ups)."""
    a, b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        a @ b
    e.record()
    e.synchronize()
    return 2 * n**3 * iters / (s.elapsed_time(e) / 1e3)


def pf(llm: LLM) -> None:
    """Prefill of all 256 anchors' prompts (one output token each) against 2 × params × tokens at the
    measured bf16 matmul rate; params = the weights every token multiplies (not the embedding table, and
    not the LM head, which runs for the sampled rows only); attention's own FLOPs are left out."""
    print("\nPF prefill throughput vs its compute floor (256 anchors' prompts)", flush=True)
    rate = matmul_rate()
    record("bf16_matmul_rate", rate / 1e12, "TFLOP/s", None, "8192^3 bf16 product on random data, mean of 10")
    prompts, _ = anchors_workload()
    eng = llm.engine
    params = sum(p.numel() for n, p in eng.model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)
    tokens = sum(map(len, prompts))
    for budget in (8192, 16384):
        sched = fresh_scheduler(llm, overlap=True)
        sched.max_prefill_tokens = budget
        llm.generate(prompts[:4], SamplingParams(max_tokens=1), use_tqdm=False)  # warm-up
        fresh_scheduler(llm, overlap=True).max_prefill_tokens = budget
        torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(prompts, SamplingParams(max_tokens=1, ignore_eos=True), use_tqdm=False)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        floor = 2 * params * tokens / rate
        record(f"prefill_throughput_budget{budget}", tokens / dt, "tok/s", floor / dt,
               f"{tokens} prompt tokens in {dt * 1e3:.0f} ms; ratio = compute floor / time "
               f"(2 x {params / 1e6:.0f}M params x tokens at {rate / 1e12:.0f} TFLOP/s = {floor * 1e3:.0f} ms); "
               f"max_prefill_tokens {budget}")


# ---- greedy tokens, fused kernels on vs off (issue 16) --------------------------------------------
def overlap_workload():
    import random
    rnd = random.Random(4)
    return [[rnd.randint(0, 10000) for _ in range(512)] for _ in range(64)], SamplingParams(max_tokens=512, ignore_eos=True)


def tokens_parity():
    """The 64-request overlap workload (P4's) on an engine with the fused kernels on, then on a fresh one with
    them off (`fused_kernels=False`): how many requests' greedy tokens are identical, and where they part. It runs
    before the suite's big engine exists, one small engine at a time, so it fits an 80 GB card (beside the big
    engine's pool it ran out of memory on the H100 in session 33)."""
    import gc
    from minisgl_edu.model import layers
    print("\nTokens: fused kernels on vs off, P4's 64-request workload, greedy, overlap on", flush=True)
    prompts, params = overlap_workload()
    runs = {}
    try:
        for fused in (True, False):  # off: plain PyTorch ops (its graphs are captured with them)
            llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=64, cuda_graph_max_bs=64,
                      max_total_tokens=70_000, fused_kernels=fused, warm_start=False)
            runs[fused] = [o["token_ids"] for o in llm.generate(prompts, params, use_tqdm=False)]
            del llm
            gc.collect()
            torch.cuda.empty_cache()
    finally:
        layers.use_kernels(fused=True)  # the switch is per process: back on for what runs after
    on, off = runs[True], runs[False]
    same = sum(a == b for a, b in zip(on, off))
    first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a)) for a, b in zip(on, off)]
    record("tokens_fused_eq_plain_requests", same, "of 64", same / 64,
           f"greedy, 512 tokens each; first token equal in {sum(f > 0 for f in first)}/64; median first "
           f"difference at token {int(np.median(first))}; tokens equal before the first difference "
           f"{sum(first)}/{64 * 512}")


# ---- P2x: an experiment, not the library ------------------------------------------------------
def p2x(bw: float) -> None:
    """How much of the gap is RMSNorm's chain of small kernels? Swap in torch's fused rms_norm (a
    monkeypatch for this measurement only) and time decode steps at batch 1 and 256 through graphs."""
    import torch.nn.functional as F
    from minisgl_edu.model.layers import RMSNorm
    print("\nP2x experiment: RMSNorm as one torch.nn.functional.rms_norm call", flush=True)
    original = RMSNorm.forward
    RMSNorm.forward = lambda self, x: F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
    try:
        llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256,
                  max_total_tokens=300_000)
        eng = llm.engine
        w, kvt = weight_bytes(eng.model), kv_bytes_per_token(eng)
        for bs in (1, 256):
            batch = make_decode_batch(eng, bs, 1024, seed=bs)
            floor = (w + bs * 1025 * kvt) / bw
            graph = time_steps(lambda: eng.forward(batch), iters=100)
            replay = time_steps(eng.graphs.graphs[eng.graphs.padded_size(bs)].replay, iters=100)
            release(eng, batch)
            record(f"p2x_fused_rmsnorm_decode_step_bs{bs}_graph", graph * 1e3, "ms", graph / floor,
                   "experiment (RMSNorm monkeypatched to F.rms_norm); ratio = time / floor")
            record(f"p2x_fused_rmsnorm_replay_only_bs{bs}", replay * 1e3, "ms", replay / floor, "experiment")
    finally:
        RMSNorm.forward = original


# ---- issue 16: the lean step vs its plain twin, and a cuBLASLt experiment --------------------------
def host_alone(eng, batch) -> float:
    """Median CPU time of Engine._forward with the GPU idle when each step starts (a synchronize after each): the
    host's own work for `batch`'s step, no waits, in seconds."""
    eng.timeline = Timeline(eng.device)
    for _ in range(30):
        eng.forward(batch)
        torch.cuda.synchronize()
    alone = float(np.median([t1 - t0 for t0, t1, _, _ in list(eng.timeline.entries)[5:]]))
    eng.timeline = None
    return alone


def host_and_step(eng, batch) -> tuple[float, float]:
    """(graph step time, median CPU time of Engine._forward per graph step) for `batch`, in seconds."""
    graph = time_steps(lambda: eng.forward(batch), iters=100)
    eng.timeline = Timeline(eng.device)
    time_steps(lambda: eng.forward(batch), iters=30)
    cpu = float(np.median([t1 - t0 for t0, t1, _, _ in list(eng.timeline.entries)[5:]]))
    eng.timeline = None
    return graph, cpu


def lean(llm: LLM, bw: float) -> None:
    """Decode step and host time at batch 1, 8 and 256 with `lean_step` off and on (the same engine and graphs:
    the switch is read per step), then P1 with it off (P1 with it on is part p1)."""
    print("\nLEAN decode step, lean_step off vs on (same engine), graph, context ~1k", flush=True)
    eng = llm.engine
    fresh_scheduler(llm, overlap=True)
    w, kvt = weight_bytes(eng.model), kv_bytes_per_token(eng)
    for bs in (1, 8, 256):
        batch = make_decode_batch(eng, bs, 1024, seed=bs)
        floor = (w + bs * 1025 * kvt) / bw
        got = {}
        for on in (False, True, False, True):  # twice each: the second pair is the one recorded
            eng.lean_step = on
            got[on] = host_and_step(eng, batch)
        eng.lean_step = True
        release(eng, batch)
        for on in (False, True):
            name = f"lean_{'on' if on else 'off'}_decode_step_bs{bs}"
            record(name + "_graph", got[on][0] * 1e3, "ms", got[on][0] / floor, "lean_step; ratio = time / memory floor")
            record(name + "_graph_cpu", got[on][1] * 1e3, "ms", got[on][1] / got[on][0],
                   "median CPU time of Engine._forward; ratio = CPU time / step time")
    p1_plain(llm, bw)


def p1_plain(llm: LLM, bw: float) -> None:
    llm.engine.lean_step = False
    try:
        p1(llm, bw, tag="_lean_off")
    finally:
        llm.engine.lean_step = True


def experiment(bw: float, tag: str, sizes: tuple[int, ...], with_p1: bool = True, p1_runs: int = 1, **switches) -> LLM:
    """A fresh engine under the experiment's switch (set by the caller before): kernels per decoder layer in
    the graph replay, decode step (and its host time) and replay alone at `sizes`, then P1."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from profile_decode import kernels, one_layer
    llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256, **switches)
    eng = llm.engine
    w, kvt, nl = weight_bytes(eng.model), kv_bytes_per_token(eng), eng.model_config.num_hidden_layers
    for bs in sizes:
        batch = make_decode_batch(eng, bs, 1024, seed=bs)
        floor = (w + bs * 1025 * kvt) / bw
        graph, cpu = host_and_step(eng, batch)
        alone = host_alone(eng, batch)
        kind = eng.graphs.balanced_graphs if batch.balanced else eng.graphs.graphs  # the graph this step replays
        g = kind[eng.graphs.padded_size(bs)]
        replay = time_steps(g.replay, iters=100)
        layer = one_layer(kernels(g.replay), nl)
        release(eng, batch)
        record(f"{tag}_decode_step_bs{bs}_graph", graph * 1e3, "ms", graph / floor, f"{tag}; ratio = time / floor")
        record(f"{tag}_decode_step_bs{bs}_graph_cpu", cpu * 1e3, "ms", cpu / graph, f"{tag}; CPU time / step time")
        record(f"{tag}_decode_step_bs{bs}_host_alone", alone * 1e3, "ms", alone / graph,
               f"{tag}; the host's own work (GPU idle at each start) / step time")
        record(f"{tag}_replay_only_bs{bs}", replay * 1e3, "ms", replay / floor, tag)
        record(f"{tag}_kernels_per_layer_bs{bs}", len(layer), "kernels", sum(t for _, t in layer),
               f"{tag}, graph replay; ratio = us per layer: " + ", ".join(f"{n[:32]} {t:.1f}" for n, t in layer))
    if with_p1:
        for i in range(p1_runs):
            p1(llm, bw, tag=f"_{tag}" + (f"_run{i + 1}" if p1_runs > 1 else ""))
        if BREAKDOWN:
            p1_breakdown(llm, bw, tag=f"_{tag}")
    return llm


def tensor_core_decode(bw: float) -> None:
    """Experiment: every decode graph through FlashInfer's tensor-core decode kernel (its prefill kernel with one
    query per request), which Qwen3's GQA group of 2 does not use by default (attention/flashinfer.py)."""
    import minisgl_edu.attention.flashinfer as fib
    print("\nTC experiment: decode attention through the tensor-core kernel", flush=True)
    saved, fib.CUDA_CORE_GROUP_SIZES = fib.CUDA_CORE_GROUP_SIZES, ()
    try:
        experiment(bw, "tc", (1, 64, 256))
    finally:
        fib.CUDA_CORE_GROUP_SIZES = saved


def tc_whole(bw: float) -> None:
    """Experiment (session 44): the balanced (tensor-core) graphs planned unsplit (TC_WHOLE: no partial outputs, no
    merge) against FlashInfer's graph plan (split: a merge, a valid-block mask), their spare blocks on request 0 or on
    a spare lane (SPARE_LANE). One engine each, in this order: the default; then, with every step past one wave sent
    to the balanced graphs (WAVE_SPILL unbounded) for P2 at 192 and 256 even requests, the split plan, unsplit with
    the spares on request 0, unsplit with the spare lane, and that over pages of 16. P1 (under the default wave rule:
    its large steps are uneven, balanced either way) on the default and the spare-lane engines."""
    import gc
    import minisgl_edu.attention.flashinfer as fib
    print("\nTCWHOLE experiment: the balanced graphs planned unsplit (TC_WHOLE)", flush=True)
    saved = fib.TC_WHOLE, fib.SPARE_LANE, fib.WAVE_SPILL
    inf = float("inf")
    engines = (("tcbase", False, False, saved[2], 1, True), ("tcsplit", False, False, inf, 1, False),
               ("tcwhole0", True, False, inf, 1, False), ("tcwhole", True, True, inf, 1, True),
               ("tcwhole16", True, True, inf, 16, True))
    only = os.environ.get("TCWHOLE_ENGINES")  # e.g. "tcbase,tcwhole16": a short call runs those engines alone
    if only and (bad := set(only.split(",")) - {e[0] for e in engines}):  # a misspelt name would run nothing
        raise SystemExit(f"TCWHOLE_ENGINES: unknown engines {sorted(bad)}; choose from {[e[0] for e in engines]}")
    try:
        for tag, whole, lane, spill, page, with_p1 in engines:
            if only and tag not in only.split(","):
                continue
            fib.TC_WHOLE, fib.SPARE_LANE, fib.WAVE_SPILL = whole, lane, spill
            llm = experiment(bw, tag, (192, 256), with_p1=False, page_size=page)
            fib.WAVE_SPILL = saved[2]
            if with_p1:
                p1(llm, bw, tag=f"_{tag}")
            del llm
            gc.collect()  # one engine's pool and graphs go before the next is sized
            torch.cuda.empty_cache()
    finally:
        fib.TC_WHOLE, fib.SPARE_LANE, fib.WAVE_SPILL = saved


def one_engine_each(bw: float, runs, sizes: tuple[int, ...], module=None, name: str = "") -> None:
    """A pair's engines, one a run, in order, each freed before the next is sized: runs = [(tag, banner, value,
    switches)]; `module`.`name` is set to the run's value while it runs (restored after), `switches` go to the LLM."""
    import gc
    saved = getattr(module, name) if module is not None else None
    try:
        for tag, banner, value, switches in runs:
            print(f"\n{tag.upper()}: {banner}", flush=True)
            if module is not None:
                setattr(module, name, value)
            experiment(bw, tag, sizes, **switches)
            gc.collect()
            torch.cuda.empty_cache()
    finally:
        if module is not None:
            setattr(module, name, saved)


def tc_whole_pair(bw: float) -> None:
    """TC_WHOLE's naive twin beside it: one engine with the balanced graphs split as FlashInfer plans them, then one
    unsplit (the default, spare lane on), each at 192 and 256 even requests and P1."""
    import minisgl_edu.attention.flashinfer as fib
    runs = [(tag, f"TC_WHOLE {whole}", whole, {}) for tag, whole in (("tcpair_off", False), ("tcpair_on", True))]
    one_engine_each(bw, runs, (192, 256), fib, "TC_WHOLE")


def graph_head_pair(bw: float) -> None:
    """The LM head and the greedy argmax launched after each decode graph (graph_head=False, the twin) and inside it
    (the default), one engine each, twice in alternation: decode steps at 1, 8, 64 and 256 requests with the host's
    own work, then P1."""
    runs = [(f"head{'on' if on else 'off'}{i // 2 + 1}", f"graph_head {on}", None, dict(graph_head=on))
            for i, on in enumerate((False, True, False, True))]
    one_engine_each(bw, runs, (1, 8, 64, 256))


def layer_major(bw: float) -> None:
    """Experiment (session 48): the KV pool laid out layer-major (`paging.KV_LAYER_MAJOR`) beside the default [2,
    layers, ...], one engine each, twice in alternation: decode steps at 64 and 256 requests, then P1. Asked because
    the H200's decode graph read its K/V 0.6-3.6 % slower than FlashInfer's kernel alone (3.6 % on one machine;
    RESULTS, session 49); `attn_pages.py --engine-like` asks the same of the kernel alone."""
    from minisgl_edu import paging
    runs = [(f"kv{'layermajor' if lm else 'default'}{i // 2 + 1}", f"KV pool {'[layers, 2, ...]' if lm else '[2, layers, ...]'}",
             lm, {}) for i, lm in enumerate((False, True, False, True))]
    one_engine_each(bw, runs, (64, 256), paging, "KV_LAYER_MAJOR")


def no_balanced(bw: float) -> None:
    """The naive twin of the balanced decode choice (BALANCED_DECODE = False: every decode step through the CUDA-core
    kernel, however uneven its contexts), beside the default's P1 and P2 in the same run."""
    import minisgl_edu.attention.flashinfer as fib
    print("\nNOBAL experiment: every decode step through the CUDA-core kernel (BALANCED_DECODE = False)", flush=True)
    saved, fib.BALANCED_DECODE = fib.BALANCED_DECODE, False
    try:
        experiment(bw, "nobal", (256,))
    finally:
        fib.BALANCED_DECODE = saved


def wave(bw: float) -> None:
    """The naive twin of the wave rule (WAVE_BALANCED = False: decode steps just past one wave of the CUDA-core kernel
    go through it unless uneven) beside the default, one engine each, in that order: P2 at 160, 192, 224 requests
    (even contexts), then P1 twice (and its breakdown with p1b)."""
    import gc
    import minisgl_edu.attention.flashinfer as fib
    print("\nWAVE experiment: the wave rule off, then on (the default)", flush=True)
    saved = fib.WAVE_BALANCED
    try:
        for on, tag in ((False, "wave_off"), (True, "wave_on")):
            fib.WAVE_BALANCED = on
            experiment(bw, tag, (160, 192, 224), p1_runs=2)
            gc.collect()  # the first engine's pool and graphs go before the second is sized
            torch.cuda.empty_cache()
    finally:
        fib.WAVE_BALANCED = saved


def lean_balanced(bw: float) -> None:
    """Experiment: the graphs' wrappers re-planned by the host planner alone (LEAN_PLAN), first as they are, then with
    the balanced kernel's KV threshold at 0: that threshold is there to hide its plan()'s host time (a Python max()
    over the lengths), which the lean plan does not spend."""
    import minisgl_edu.attention.flashinfer as fib
    saved = fib.LEAN_PLAN, fib.BALANCED_MIN_KV_BYTES
    try:
        for tag, threshold in (("leanplan", saved[1]), ("leanbal", 0)):
            print(f"\n{tag.upper()} experiment: LEAN_PLAN on, BALANCED_MIN_KV_BYTES {threshold}", flush=True)
            fib.LEAN_PLAN, fib.BALANCED_MIN_KV_BYTES = True, threshold
            experiment(bw, tag, (64, 256))
    finally:
        fib.LEAN_PLAN, fib.BALANCED_MIN_KV_BYTES = saved


def paged(bw: float) -> None:
    """Experiment: FlashInfer over pages of 16 tokens (page_size=16: attention.metadata.page_args), whose kernels look
    up one index per page instead of one per token (benchmarks/attn_pages.py: the tensor-core decode kernel read the
    KV 3-4 % faster so, the CUDA-core one the same); then also every decode step of 64+ requests through the
    tensor-core kernel (UNEVEN at 1.0), even ones included. First the same pool read slot by slot (PAGES off)."""
    import minisgl_edu.attention.flashinfer as fib
    saved = fib.UNEVEN, fib.PAGES
    try:
        for tag, uneven, pages in (("ps16slots", saved[0], False), ("ps16", saved[0], True), ("ps16tc", 1.0, True)):
            print(f"\n{tag.upper()} experiment: page_size 16, FlashInfer pages {pages}, UNEVEN {uneven}", flush=True)
            fib.UNEVEN, fib.PAGES = uneven, pages
            experiment(bw, tag, (64, 128, 256), page_size=16)
            import gc
            gc.collect()
            torch.cuda.empty_cache()
    finally:
        fib.UNEVEN, fib.PAGES = saved


def paged_p1(bw: float) -> None:
    """P1 with page_size 16, FlashInfer reading pages (PAGES) and slot by slot, alternated twice (one engine each)."""
    import gc

    import minisgl_edu.attention.flashinfer as fib
    saved = fib.PAGES
    try:
        for i, pages in enumerate((True, False, True, False)):
            fib.PAGES = pages
            llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256, page_size=16)
            p1(llm, bw, tag=f"_ps16_{'pages' if pages else 'slots'}_{i // 2 + 1}")
            del llm
            gc.collect()
            torch.cuda.empty_cache()
    finally:
        fib.PAGES = saved


def split_sizes(eng, ctx: int = 1024) -> dict[int, bool]:
    """For each captured decode size, whether FlashInfer's planner gives its CUDA graph the partition-KV kernel (and a
    merge) for that many requests of `ctx` keys: in CUDA-graph mode it always does so while size x kv_heads CTAs fit
    the grid at once (its scheduler.cuh), even where nothing is split. Read from the plan info's split_kv."""
    from minisgl_edu.paging import to_device
    out, slot = {}, eng.graphs.dummy_slot
    be = eng.backend
    for bs in eng.graphs.sizes:
        w = be.graph_wrappers[bs, 0]
        indptr = to_device((np.arange(bs + 1) * ctx).astype(np.int32), eng.device, host=True)
        ones = to_device(np.ones(bs, np.int32), eng.device, host=True)
        idx = torch.full((bs * ctx,), slot, dtype=torch.int32, device=eng.device)
        w.plan(indptr, idx, ones, head_dim=be.head_dim, num_qo_heads=be.q_heads, num_kv_heads=be.kv_heads, page_size=1,
               q_data_type=be.dtype, kv_data_type=be.dtype)
        out[bs] = bool(list(w._plan_info)[9])
    return out


def no_skinny(bw: float) -> None:
    """The naive twin of the 2-16-row GEMM (skinny_gemm=False: every product through cuBLAS), beside the default's P1
    and P2 in the same run: decode steps of 2, 8 and 16 requests, then P1 (session 36)."""
    print("\nNOSKINNY experiment: every product through cuBLAS (skinny_gemm=False)", flush=True)
    experiment(bw, "noskinny", (2, 8, 16), skinny_gemm=False)


def skinny(bw: float) -> None:
    """The default engine (the 2-16-row GEMM on) at noskinny's sizes, for its P2 side: P1 is the run's own p1."""
    print("\nSKINNY experiment: the default (skinny_gemm=True) at 2, 8 and 16 requests", flush=True)
    experiment(bw, "skinny", (2, 8, 16), with_p1=False)


def no_split(bw: float) -> None:
    """Experiment: decode graphs padded past FlashInfer's partition-KV sizes. Call 1's profile (session 18): at 128
    requests of 1,024 keys the graph's decode kernel took 136.8 us a layer plus a 3.4 us merge, where the eager kernel
    (no split) took 125.7 in attn_pages.py; at 256 requests, which fill the grid, the graph has no merge and matches.
    Here every decode batch of at least half the first non-split size runs in that size's graph (its extra lanes read
    the dummy page): P2 at 64, 96, 128, then P1."""
    from minisgl_edu.graphs import pad_to
    print("\nNOSPLIT experiment: decode graphs padded past the partition-KV sizes", flush=True)
    llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256)
    eng = llm.engine
    split = split_sizes(eng)
    print("  split-KV kernel by graph size:", " ".join(f"{k}:{int(v)}" for k, v in split.items()), flush=True)
    first = min((k for k, v in split.items() if not v), default=None)
    record("nosplit_first_unsplit_graph", first or 0, "requests", None,
           "smallest decode graph FlashInfer plans without partition-KV (1,024 keys each); " +
           ", ".join(f"{k}:{int(v)}" for k, v in split.items()))
    if first is None:
        return
    sizes = eng.graphs.sizes
    w, kvt = weight_bytes(eng.model), kv_bytes_per_token(eng)
    for label, fn in (("default", lambda bs: pad_to(sizes, bs)),
                      ("nosplit", lambda bs: max(pad_to(sizes, bs), first) if 2 * bs >= first else pad_to(sizes, bs))):
        eng.graphs.padded_size = fn
        for bs in (64, 96, 128):
            batch = make_decode_batch(eng, bs, 1024, seed=bs)
            floor = (w + bs * 1025 * kvt) / bw
            t = time_steps(lambda: eng.forward(batch), iters=50)
            release(eng, batch)
            record(f"nosplit_{label}_decode_step_bs{bs}_graph", t * 1e3, "ms", t / floor,
                   f"graph {fn(bs)} for {bs} requests; ratio = time / floor")
        p1(llm, bw, tag=f"_nosplit_{label}")
    del eng.graphs.padded_size


def free(bw: float) -> None:
    """Bounds, not a mode (session 32): what would P1 and the decode steps read if some of a layer's kernels cost
    nothing? One engine each with those kernels skipped: their outputs are garbage, but ignore_eos keeps every
    request's length, so the steps, batches and bytes are P1's own. 'free_small': both RMSNorms (with their residual
    add), SiLU-and-mul (down reads the gate half in place) and our q/k kernel skipped, which is what fusing every one
    of them into the products could at best save; 'free_products': the four products skipped (an uninitialised
    tensor of their shape); 'free_both': only the attention (and its merge), the embedding, the LM head and the
    sampling are left. P2 at 64, 128, 256 (with the kernels left a layer), then P1 (and its breakdown with p1b)."""
    import gc
    from minisgl_edu.model import layers, qk_kernel
    saved = (layers.RMSNorm.forward, layers.silu_and_mul, qk_kernel.qk_norm_rope_store,
             layers.ColumnParallelLinear.forward, layers.RowParallelLinear.forward)

    def skip_small() -> None:
        layers.RMSNorm.forward = lambda self, x, residual=None, inplace=False: x if residual is None else (x, residual)
        layers.silu_and_mul = lambda x: x[:, : x.shape[-1] // 2]  # a view: no kernel, row stride 2x its width
        qk_kernel.qk_norm_rope_store = lambda *args, **kwargs: None

    def skip_products() -> None:
        layers.ColumnParallelLinear.forward = lambda self, x: x.new_empty(x.shape[0], self.weight.shape[0])
        layers.RowParallelLinear.forward = lambda self, x: x.new_empty(x.shape[0], self.weight.shape[0])
    def restore() -> None:
        (layers.RMSNorm.forward, layers.silu_and_mul, qk_kernel.qk_norm_rope_store,
         layers.ColumnParallelLinear.forward, layers.RowParallelLinear.forward) = saved
    try:
        for tag, skips in (("free_small", (skip_small,)), ("free_products", (skip_products,)),
                           ("free_both", (skip_small, skip_products))):
            print(f"\n{tag.upper()} bound: " + ", ".join(f.__name__ for f in skips), flush=True)
            for f in skips:
                f()
            experiment(bw, tag, (64, 128, 256))
            restore()
            gc.collect()
            torch.cuda.empty_cache()
    finally:
        restore()


def blaslt(bw: float) -> None:
    """Experiment: torch's matmuls through cuBLASLt (`preferred_blas_library`), set before the graphs are
    captured (does the down GEMM's split-K reduce go?). The library is set back afterwards."""
    print("\nLT experiment: preferred_blas_library('cublaslt')", flush=True)
    before = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        experiment(bw, "lt", (1, 256))
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def gemv_row(bw: float) -> None:
    """Experiment: o_proj through our GEMV too (row-major; GEMV_CONFIG["row"] = (256, 4), the default until
    serving showed the row-major o_proj slowing the steps of many rows), side by side with P2's default."""
    from minisgl_edu.model import qk_kernel
    print("\nGEMVROW experiment: o_proj through our GEMV too (stored row-major)", flush=True)
    saved = dict(qk_kernel.GEMV_CONFIG)
    qk_kernel.GEMV_CONFIG.update(row=(256, 4))
    try:
        experiment(bw, "gemvrow", (1,), with_p1=False)
    finally:
        qk_kernel.GEMV_CONFIG.update(saved)


def no_gemv(bw: float) -> None:
    """Experiment: the naive twin of our one-row GEMV (`gemv_kernel=False`: cuBLAS, and FlashInfer's silu_and_mul
    before down): kernels per layer and the batch-1 step, side by side with P2's (which runs the GEMV)."""
    print("\nNOGEMV experiment: cuBLAS at one row (gemv_kernel=False)", flush=True)
    experiment(bw, "nogemv", (1,), with_p1=False, gemv_kernel=False)


def gemm_time(fn, reps: int = 20) -> tuple[float, int]:
    """(µs per call of `fn`, GPU kernels per call): `reps` calls captured in one CUDA graph (no launch gaps)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    n = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    t = time_steps(g.replay, iters=50)
    return t / reps * 1e6, n


def gemm(bw: float) -> None:
    """Experiment: the decoder layer's four GEMMs (Qwen3-0.6B shapes) at M = 1, 8, 64 rows, as the model runs
    them (F.linear: cuBLAS), through cuBLASLt, as x @ W.T with W.T stored contiguous, and (M = 1) through our
    GEMV (model/gemv.cu) and as torch.mv: µs, share of the copy bandwidth for the weight reads, kernels per call (2 = split-K)."""
    import torch.nn.functional as F
    from minisgl_edu.model import qk_kernel
    print("\nGEMM experiment: the layer's GEMMs at small M", flush=True)
    shapes = {"qkv": (1024, 4096), "o_proj": (2048, 1024), "gate_up": (1024, 6144), "down": (3072, 1024)}
    before = torch.backends.cuda.preferred_blas_library()
    for name, (k, n) in shapes.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        wt = w.t().contiguous()
        for m in (1, 8, 64):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            fns = {"cublas": lambda: F.linear(x, w), "cublaslt": lambda: F.linear(x, w), "pretransposed": lambda: x @ wt}
            if m == 1:  # one row as a matrix-vector product: cuBLAS's GEMV path (no split-K reduce?)
                fns["mv"] = lambda: torch.mv(w, x[0])
            if m == 1 and qk_kernel.gemv(x, w) is not None:
                fns["gemv"] = lambda: qk_kernel.gemv(x, w)
            for variant, fn in fns.items():
                torch.backends.cuda.preferred_blas_library("cublaslt" if variant == "cublaslt" else "cublas")
                try:
                    us, nk = gemm_time(fn)
                except Exception as e:  # an experiment: report, do not fail the suite
                    print(f"  {name} m={m} {variant}: failed: {type(e).__name__}: {e}", flush=True)
                    continue
                record(f"gemm_{name}_m{m}_{variant}", us, "us", (w.numel() * 2 / (us * 1e-6)) / bw,
                       f"{k}->{n}; {nk} kernel(s) per call; ratio = weight bytes / time / copy bandwidth")
    torch.backends.cuda.preferred_blas_library(before)


def gemv_sweep(bw: float) -> None:
    """Experiment: our one-row kernel (model/gemv.cu) at every (threads, rows per block) it is built for, against
    cuBLAS, on the decoder layer's four products of Qwen3-0.6B and SmolLM2-135M at M = 1 (down: SiLU-and-mul
    + down GEMM against FlashInfer's silu_and_mul + cuBLAS): us, share of the copy bandwidth, kernels per call,
    and the error against the float32 product. Each timing cycles through copies of the weight that together
    fill 4x the L2 cache, so every call reads its weight from DRAM, as in the model (one copy would stay in L2)."""
    import torch.nn.functional as F
    from minisgl_edu.model import layers, qk_kernel
    print("\nGEMV experiment: one row through each product, our kernel's configurations against cuBLAS", flush=True)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    shapes = {"qwen3": {"qkv": (1024, 4096), "o_proj": (2048, 1024), "gate_up": (1024, 6144), "down": (3072, 1024)},
              "smollm2": {"qkv": (576, 960), "o_proj": (576, 576), "gate_up": (576, 3072), "down": (1536, 576)}}
    for model, table in shapes.items():
        for name, (k, n) in table.items():
            silu = name == "down"
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
            copies = [w] + [w.clone() for _ in range(-(-4 * l2 // (w.numel() * 2)) - 1)]
            x = torch.randn(1, 2 * k if silu else k, device="cuda", dtype=torch.bfloat16)
            col = [c.t().contiguous().t() for c in copies]  # the same weights stored column-major
            if silu:
                exact = F.linear(layers.silu_and_mul(x).float(), w.float())
                fns = {"cublas": (lambda w: F.linear(layers.silu_and_mul(x), w), copies)}
            else:
                exact = F.linear(x.float(), w.float())
                fns = {"cublas": (lambda w: F.linear(x, w), copies), "cublas_colmajor": (lambda w: F.linear(x, w), col)}
            for t, r in qk_kernel.GEMV_BUILT:
                if qk_kernel.gemv_name("silu_" if silu else "", k, t, r) is not None:
                    fns[f"t{t}_r{r}"] = (lambda w, t=t, r=r: qk_kernel.gemv(x, w, silu, (t, r)), copies)
            best = None
            for variant, (fn, ws) in fns.items():
                us, nk = gemm_time(lambda: [fn(c) for c in ws], reps=1)
                us, nk = us / len(ws), nk // len(ws)
                err = float((fn(ws[0]).float() - exact).norm() / exact.norm())
                print(f"  {model:8s} {name:8s} {k:5d}->{n:<5d} {variant:16s} {us:7.2f} us {w.numel() * 2 / (us * 1e-6) / bw:5.2f}"
                      f" of copy bw  {nk} kernel(s)  rel err {err:.1e}", flush=True)
                if variant.startswith("t") and err < 1e-2 and (best is None or us < best[1]):
                    best = (variant, us, nk)
                if variant == "cublas":
                    base = (us, nk)
            if best is not None:
                record(f"gemv_{model}_{name}_m1_best", best[1], "us", base[0] / best[1],
                       f"{k}->{n}; our kernel {best[0]}, {best[2]} kernel(s); ratio = cuBLAS ({base[0]:.2f} us, "
                       f"{base[1]} kernel(s){' with silu_and_mul' if silu else ''}) / ours")


def split_k_sweep(bw: float) -> None:
    """Experiment (issue 16): the decoder layer's four products at M = 16..256 rows, cuBLAS (F.linear, the layout the
    model stores) against split-K by hand: K cut into S slices, one strided-batched GEMM (bmm) writes S partial
    products [S, M, N], one sum adds them (S x more CTAs for the few output tiles of o_proj and down). Partials in
    bf16, or in float32 (bmm's out_dtype) then summed and cast. L2-cold: weight copies filling 4x the L2 cycle."""
    import torch.nn.functional as F
    print("\nSPLITK experiment: cuBLAS against split-K (bmm + sum) at 16..256 rows", flush=True)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    shapes = {"qwen3": {"qkv": (1024, 4096), "o_proj": (2048, 1024), "gate_up": (1024, 6144), "down": (3072, 1024)},
              "smollm2": {"qkv": (576, 960), "o_proj": (576, 576), "gate_up": (576, 3072), "down": (1536, 576)}}

    def split(x, w, s, fp32):
        k = x.shape[1]
        xs = x.view(x.shape[0], s, k // s).transpose(0, 1)
        ws = w.t().reshape(s, k // s, w.shape[0])  # a view for either layout: w.t() splits along its rows
        if fp32:
            return torch.bmm(xs, ws, out_dtype=torch.float32).sum(0).to(x.dtype)
        return torch.bmm(xs, ws).sum(0)
    for model, table in shapes.items():
        for name, (k, n) in table.items():
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
            if name == "o_proj":
                w = w.t().contiguous().t()  # as the model stores it (column_major)
            copies = [w] + [w.clone(memory_format=torch.preserve_format) if name != "o_proj" else
                            w.t().contiguous().t() for _ in range(-(-4 * l2 // (w.numel() * 2)) - 1)]
            for m in (16, 32, 64, 96, 128, 192, 256):
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                exact = F.linear(x.float(), w.float())
                fns = {"cublas": lambda w: F.linear(x, w)}
                for s_ in (2, 3, 4, 6, 8):
                    if k % s_ == 0 and (k // s_) % 8 == 0:
                        fns[f"s{s_}"] = lambda w, s_=s_: split(x, w, s_, False)
                        if s_ in (2, 4):
                            fns[f"s{s_}f32"] = lambda w, s_=s_: split(x, w, s_, True)
                line, times = [], {}
                for variant, fn in fns.items():
                    try:
                        us, nk = gemm_time(lambda: [fn(c) for c in copies], reps=1)
                    except Exception as e:  # an experiment: report, do not fail the suite
                        line.append(f"{variant} failed ({type(e).__name__})")
                        continue
                    us, nk = us / len(copies), nk // len(copies)
                    err = float((fn(w).float() - exact).norm() / exact.norm())
                    times[variant] = (us, nk, err)
                    line.append(f"{variant} {us:6.2f}us/{nk}k/{err:.0e}")
                print(f"  {model:7s} {name:7s} m={m:3d} " + "  ".join(line), flush=True)
                if "cublas" in times and len(times) > 1:
                    best = min((v for v in times if v != "cublas"), key=lambda v: times[v][0])
                    us, nk, err = times[best]
                    record(f"splitk_{model}_{name}_m{m}", us, "us", times["cublas"][0] / us,
                           f"{k}->{n}; best split {best}, {nk} kernel(s), rel err {err:.1e}; ratio = cuBLAS "
                           f"({times['cublas'][0]:.2f} us, {times['cublas'][1]} kernel(s)) / best")


# ---- output -------------------------------------------------------------------------------------
def write_results() -> None:
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.write_text(json.dumps(old + ROWS, indent=1) + "\n")
    md = ROOT / "benchmarks" / "RESULTS.md"
    latest = {}
    for r in old + ROWS:
        if r["hardware"] != "cpu" and r["metric"].startswith(("p1", "p2", "p3", "p4", "copy_bandwidth", "prefill", "bf16", "tokens", "lean", "lt_", "gemm", "smallm", "tc_", "gemv")):
            latest[r["metric"]] = r
    lines = ["<!-- gpu-table:start (generated by benchmarks/bench_gpu.py from results.json) -->",
             "| metric | value | unit | ratio | hardware | date | commit |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in latest.values():
        lines.append(f"| {r['metric']} | {r['value']:.4g} | {r['unit']} | {'' if r['ratio'] is None else r['ratio']} | "
                     f"{r['hardware']} | {r['date']} | {r['commit']} |")
    lines.append("<!-- gpu-table:end -->")
    text = md.read_text() if md.exists() else "# Benchmark results\n\n"
    start, end = text.find("<!-- gpu-table:start"), text.find("<!-- gpu-table:end -->")
    block = "\n".join(lines)
    text = text[:start] + block + text[end + len("<!-- gpu-table:end -->"):] if start >= 0 <= end else text + "\n" + block + "\n"
    md.write_text(text)


# experiments: each builds its own engine, after the default one is freed
EXPERIMENTS = {"headpair": graph_head_pair, "layermajor": layer_major, "tcwhole": tc_whole, "tcpair": tc_whole_pair, "wave": wave, "lt": blaslt, "nogemv": no_gemv, "gemvrow": gemv_row, "tc": tensor_core_decode,
               "nobal": no_balanced, "leanbal": lean_balanced, "paged": paged, "nosplit": no_split, "pagedp1": paged_p1,
               "free": free, "skinny": skinny, "noskinny": no_skinny}
PARTS = {"p1", "p1b", "p2", "p4", "pf", "tokens", "lean", "gemm", "gemv", "splitk", "p2x", *EXPERIMENTS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("parts", nargs="*", default=["p1", "p2", "p4", "p2x"], help=f"any of {sorted(PARTS)}")
    ap.add_argument("--baseline", choices=["hf"], default=None, help="re-measure transformers generate (~200 s)")
    args = ap.parse_args()
    if unknown := set(args.parts) - PARTS:  # a misspelt part would otherwise measure nothing, silently
        ap.error(f"unknown parts {sorted(unknown)}; choose from {sorted(PARTS)}")
    import signal
    # `timeout` stops a run with SIGTERM: leave through the finally below, so the rows measured so far are written
    # (session 19 lost two experiments' rows to it)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    torch.manual_seed(0)
    bw = copy_bandwidth()
    record("copy_bandwidth", bw / 1e12, "TB/s", None, "device-to-device copy of 2 GiB, read + write bytes, median of 10")
    if set(args.parts) <= {"gemm", "gemv", "splitk"}:  # products alone: no engine to build
        try:
            for name, fn in (("gemm", gemm), ("gemv", gemv_sweep), ("splitk", split_k_sweep)):
                if name in args.parts:
                    fn(bw)
        finally:
            write_results()
        return
    if "tokens" in args.parts:  # first, with engines of its own (see its docstring)
        only = set(args.parts) == {"tokens"}
        try:
            tokens_parity()
        finally:
            if only:  # else the rows are written with the rest's
                write_results()
        if only:
            return
    llm = LLM(QWEN, device="cuda", dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256)
    print(f"weights {weight_bytes(llm.engine.model) / 1e9:.3f} GB, KV {kv_bytes_per_token(llm.engine)} B/token, "
          f"pool {llm.engine.pool.num_pages * llm.engine.pool.page_size} tokens", flush=True)
    try:
        if "p1" in args.parts:
            p1(llm, bw)
        if "p1b" in args.parts:
            p1_breakdown(llm, bw)
        if "p2" in args.parts:
            p2(llm, bw)
        if "p4" in args.parts:
            p4(llm)
        if "pf" in args.parts:
            pf(llm)
        if "lean" in args.parts:
            lean(llm, bw)
        if "gemm" in args.parts:
            gemm(bw)
        if "gemv" in args.parts:
            gemv_sweep(bw)
        if "splitk" in args.parts:
            split_k_sweep(bw)
        if EXPERIMENTS.keys() & set(args.parts):
            del llm
            import gc
            gc.collect()
            torch.cuda.empty_cache()
            for name, fn in EXPERIMENTS.items():
                if name in args.parts:
                    try:
                        fn(bw)
                    except Exception as e:  # an experiment: report, do not fail the suite
                        print(f"{name} experiment failed: {type(e).__name__}: {e}", flush=True)
                    gc.collect()
                    torch.cuda.empty_cache()
            llm = None
        if "p2x" in args.parts:
            llm = None
            import gc
            gc.collect()
            torch.cuda.empty_cache()
            try:
                p2x(bw)
            except Exception as e:  # an experiment: report, do not fail the suite
                print(f"P2x experiment failed: {type(e).__name__}: {e}", flush=True)
        if args.baseline == "hf":
            llm = None
            torch.cuda.empty_cache()
            p1_hf_baseline()
    finally:
        write_results()


if __name__ == "__main__":
    main()
