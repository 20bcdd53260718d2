"""Chapter 10 on one H200: the grouped MoE path against the reference, and the Qwen3-30B-A3B
architecture (dummy weights, bf16, ~61 GB) on the anchors' offline workload.

    python scripts/gpu_moe.py check [--device cuda]          # (a) grouped vs reference, bf16 tolerance
    python scripts/gpu_moe.py bench [--device cuda] [--config DIR] [--requests N]   # (b) throughput + floor

`check` runs the experts of a small config (hidden 1024, 32 experts, top 4, intermediate 512) for
1..512 tokens: the grouped path and the reference path, both in bf16 on the device, each against the
float32 reference on the CPU. Passing: relative error ||out - ref32|| / ||ref32|| <= TOL for both, and
the grouped path's error within 2x the bf16 reference's own (no worse than the rounding it cannot avoid).
Then the grouped layer captured in a CUDA graph and replayed on new tokens (== eager), and a whole
tiny MoE model (a random checkpoint saved by transformers, 2 layers) through the engine: the first
step's logits (a prefill of 8 prompts) with the grouped path (CUDA graphs on for the decode steps
that follow) and with the reference path, both bf16, against the float32 reference. A random model
in bf16 is far from its float32 self (routing near-ties flip), so the criterion is the layer's:
the grouped model's error within 2x the bf16 reference model's own, + 0.01.

`bench` builds the model with dummy weights (experts drawn on the device), runs the anchors'
workload (256 requests, input/output lengths uniform in [100, 1024], ignore_eos), prints tok/s and the
memory floor: per decode step, the dense weights + the experts its B running tokens read (expected
under uniform routing, `moe.expected_experts_read`) + the K/V of every running request, over the copy
bandwidth measured in the same run. It also counts the distinct experts actually routed to in eager
decode steps at B = 1, 2, 4, ..., 256, prints them next to the expectation, and gives the floor again
with those measured counts (interpolated in B) in place of the expectation. Results: $OUT/moe_*.json.
`--device cpu` with a tiny config is the dry run (bandwidth then a nominal 100 GB/s, labelled so).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time
from dataclasses import replace

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minisgl_edu import LLM, SamplingParams  # noqa: E402
from minisgl_edu.bench import (anchors_workload, copy_bandwidth, fresh_scheduler, kv_bytes_per_token,  # noqa: E402
                               make_decode_batch, release)
from minisgl_edu.model.moe import (Routing, SparseMoeBlock, expected_experts_read, experts_grouped, experts_reference,  # noqa: E402
                                   moe_bytes, moe_decode_floor_s, route)
from minisgl_edu.server.scheduler_proc import BatchRecorder  # noqa: E402

TOL = 2e-2  # bf16 (8 bits of mantissa) through two GEMMs and SiLU: relative error of the layer output
OUT = pathlib.Path(os.environ.get("OUT", ROOT / "out"))
A3B = ROOT / "benchmarks" / "configs" / "qwen3-30b-a3b"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float().cpu() - b.float().cpu()).norm() / b.float().cpu().norm()).item()


def check_experts(device: str, dtype: torch.dtype) -> dict:
    """(a) the layer alone: grouped and reference in `dtype` on `device` vs float32 reference on the CPU."""
    g = torch.Generator().manual_seed(0)
    E, H, I, K = 32, 1024, 512, 4
    gate_up, down = torch.randn(E, 2 * I, H, generator=g) / H ** 0.5, torch.randn(E, H, I, generator=g) / I ** 0.5
    router = torch.randn(E, H, generator=g) / H ** 0.5
    rows = []
    for tokens in (1, 7, 64, 512):
        x = torch.randn(tokens, H, generator=g)
        routing32 = route(x @ router.T, K, True)
        ref32 = experts_reference(x, routing32, gate_up, down)
        dx, dgu, dd = (t.to(device, dtype) for t in (x, gate_up, down))
        # the same expert choice and weights: compare the expert maths, not a bf16 routing flip
        r = Routing(routing32.weights.to(device, dtype), routing32.experts.to(device))
        grouped, refb = experts_grouped(dx, r, dgu, dd), experts_reference(dx, r, dgu, dd)
        rows.append(dict(tokens=tokens, grouped_vs_ref32=rel(grouped, ref32), ref_bf16_vs_ref32=rel(refb, ref32),
                         grouped_vs_ref_bf16=rel(grouped, refb)))
        print(json.dumps(rows[-1]), flush=True)
    ok = all(r["grouped_vs_ref32"] <= TOL and r["grouped_vs_ref32"] <= 2 * r["ref_bf16_vs_ref32"] + 1e-3 for r in rows)
    return dict(layer=rows, layer_ok=ok)


def tiny_moe_dir(root: str) -> str:
    """A random Qwen3-MoE checkpoint saved by transformers; initializer_range 0.1 keeps logits apart."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(0)
    Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=16, num_experts_per_tok=4,
        norm_topk_prob=True, max_position_embeddings=2048, initializer_range=0.1)).save_pretrained(root)
    return root


def check_graph_replay(device: str, dtype: torch.dtype) -> float:
    """The grouped layer captured in a CUDA graph and replayed on new inputs == eager (0.0 expected)."""
    if device != "cuda":
        return 0.0
    g = torch.Generator(device=device).manual_seed(1)
    E, H, I, K, T = 32, 1024, 512, 4, 64
    gate_up = torch.randn(E, 2 * I, H, generator=g, device=device, dtype=dtype) / H ** 0.5
    down = torch.randn(E, H, I, generator=g, device=device, dtype=dtype) / I ** 0.5
    x, logits = torch.randn(T, H, device=device, dtype=dtype), torch.randn(T, E, device=device, dtype=dtype)
    run = lambda: experts_grouped(x, route(logits, K, True), gate_up, down)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    x.copy_(torch.randn(T, H, generator=g, device=device, dtype=dtype))  # new tokens, new routing
    logits.copy_(torch.randn(T, E, generator=g, device=device, dtype=dtype))
    graph.replay()
    return rel(out, run())


def first_step_logits(path: str, device: str, dtype: torch.dtype, impl: str, graphs: int) -> torch.Tensor:
    """Logits of the first step (the prefill of 8 prompts) of 8 greedy requests run to 8 tokens each
    (the later decode steps run as CUDA-graph replays when graphs > 0: they must run, their logits
    are not compared, since a bf16 rounding difference may change a greedy token and so every later input)."""
    kw = dict(attention="reference") if dtype == torch.float32 else {}  # FlashInfer has no float32 kernels here
    llm = LLM(path, device=device, dtype=dtype, cuda_graph_max_bs=graphs, max_total_tokens=16384, moe_impl=impl, **kw)
    rec = BatchRecorder(llm.engine, keep_logits=True)
    prompts, _ = anchors_workload(8)
    outs = llm.generate([[t % 1024 for t in p[:64]] for p in prompts], SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)
    assert all(len(o["token_ids"]) == 8 for o in outs)
    _, logits = rec.take()
    rec.detach()
    llm.close()
    return logits[0]


def check(device: str, dtype: torch.dtype) -> None:
    res = check_experts(device, dtype)
    res["graph_replay_rel"] = check_graph_replay(device, dtype)
    print(f"grouped layer, CUDA graph replay vs eager: {res['graph_replay_rel']:.2e}", flush=True)
    with tempfile.TemporaryDirectory() as d:
        path = tiny_moe_dir(d)
        fast = first_step_logits(path, device, dtype, "grouped", 16 if device == "cuda" else 0)
        slow = first_step_logits(path, device, dtype, "reference", 0)
        exact = first_step_logits(path, device, torch.float32, "reference", 0)
    res["model_grouped_vs_ref32"], res["model_ref_bf16_vs_ref32"] = rel(fast, exact), rel(slow, exact)
    res["model_grouped_vs_ref_bf16"] = rel(fast, slow)
    res["model_top1_grouped_vs_ref32"] = (fast.argmax(-1) == exact.argmax(-1)).float().mean().item()
    res["ok"] = (res["layer_ok"] and res["graph_replay_rel"] < 1e-6
                 and res["model_grouped_vs_ref32"] <= 2 * res["model_ref_bf16_vs_ref32"] + 1e-2)
    res.update(tol=TOL, device=device, dtype=str(dtype), gpu=torch.cuda.get_device_name() if device == "cuda" else "cpu")
    print(json.dumps({k: v for k, v in res.items() if k != "layer"}), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "moe_check.json").write_text(json.dumps(res, indent=1))
    if not res["ok"]:
        sys.exit("MoE check failed: see moe_check.json")


def experts_per_step(llm: LLM, sizes: tuple[int, ...]) -> list[dict]:
    """Eager decode steps at each batch size: distinct experts routed to per sparse layer, vs uniform."""
    fresh_scheduler(llm, overlap=False)  # the last run's prefix cache gives its pages back first
    eng = llm.engine
    blocks = [m for m in eng.model.modules() if isinstance(m, SparseMoeBlock)]
    graphs, eng.graphs = eng.graphs, None  # hooks do not run inside a graph replay
    rows = []
    try:
        for bs in sizes:
            batch = make_decode_batch(eng, bs, 256, seed=bs)
            for b in blocks:
                b.trace = []
            eng.forward(batch)
            seen = [len(torch.unique(b.trace[-1].experts)) for b in blocks]
            for b in blocks:
                b.trace = None
            release(eng, batch)
            e, k = blocks[0].experts.gate_up_proj.shape[0], blocks[0].top_k
            rows.append(dict(batch=bs, distinct_mean=sum(seen) / len(seen), distinct_min=min(seen),
                             expected_uniform=round(expected_experts_read(bs, e, k), 2), num_experts=e))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        eng.graphs = graphs
    return rows


def bench(device: str, config: str, n: int) -> None:
    bw = copy_bandwidth(device) if device == "cuda" else 1e11
    t0 = time.perf_counter()
    llm = LLM(config, device=device, dummy_weights=True, max_running_reqs=256, cuda_graph_max_bs=256 if device == "cuda" else 0)
    build_s = time.perf_counter() - t0
    eng = llm.engine
    wb, kvt = moe_bytes(eng.model), kv_bytes_per_token(eng)
    print(f"built in {build_s:.1f} s: dense {wb.dense / 1e9:.2f} GB + {wb.sparse_layers} x {wb.num_experts} experts x "
          f"{wb.per_expert / 1e6:.2f} MB, KV {kvt} B/token, pool {eng.pool.num_pages * eng.pool.page_size} tokens", flush=True)
    prompts, out_lens = anchors_workload(n)
    params = [SamplingParams(max_tokens=o, ignore_eos=True) for o in out_lens]
    llm.generate(prompts[:8], SamplingParams(max_tokens=16, ignore_eos=True), use_tqdm=False)  # warm-up
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    sync()
    dt = time.perf_counter() - t
    tokens = sum(len(o["token_ids"]) for o in outs)
    assert tokens == sum(out_lens), (tokens, sum(out_lens))
    print(f"anchors' workload: {tokens} tokens in {dt:.2f} s = {tokens / dt:.0f} tok/s", flush=True)
    try:  # the routing census; a failure here must not lose the throughput above
        rows = experts_per_step(llm, tuple(b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max(n, 8)))
    except RuntimeError as e:
        print(f"experts_per_step failed: {e}"[:300], flush=True)
        rows = []
    if not rows:  # no census: the uniform-routing estimate stands in for the measured one
        e, k = wb.num_experts, next(m for m in eng.model.modules() if isinstance(m, SparseMoeBlock)).top_k
        rows = [dict(batch=b, distinct_mean=expected_experts_read(b, e, k)) for b in (1, 256)]
    measured = lambda b: float(np.interp(b, [r["batch"] for r in rows], [r["distinct_mean"] for r in rows]))
    lens = [len(p) for p in prompts]
    floor = moe_decode_floor_s(lens, out_lens, wb, kvt, bw)
    floor_measured = moe_decode_floor_s(lens, out_lens, wb, kvt, bw, experts_read=measured)
    every_expert = moe_decode_floor_s(lens, out_lens, replace(wb, dense=wb.total, sparse_layers=0), kvt, bw)
    res = dict(model=pathlib.Path(config).name, requests=n, tokens=tokens, seconds=round(dt, 2), tok_s=round(tokens / dt, 1),
               floor_s=round(floor, 3), floor_tok_s=round(tokens / floor, 1), share_of_floor=round(floor / dt, 3),
               floor_measured_experts_s=round(floor_measured, 3), floor_if_every_expert_read_s=round(every_expert, 3), copy_bandwidth_tb_s=round(bw / 1e12, 3),
               bandwidth_note="measured" if device == "cuda" else "nominal 100 GB/s (CPU dry run)",
               weights_gb=round(wb.total / 1e9, 2),
               build_s=round(build_s, 1), gpu=torch.cuda.get_device_name() if device == "cuda" else "cpu",
               commit=os.environ.get("MINISGL_COMMIT", "?"))
    res["experts_read"] = rows
    print(json.dumps({k: v for k, v in res.items() if k != "experts_read"}), flush=True)
    llm.close()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "moe_bench.json").write_text(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["check", "bench"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--config", default=str(A3B))
    ap.add_argument("--requests", type=int, default=256)
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.what == "check":
        check(a.device, getattr(torch, a.dtype))
    else:
        bench(a.device, a.config, a.requests)


if __name__ == "__main__":
    main()
