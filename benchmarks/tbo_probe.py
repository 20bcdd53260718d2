"""Issue 16: would two micro-batches on two streams hide a decode layer's small kernels under its attention?

    python benchmarks/tbo_probe.py [--bs 128,256] [--ctx 1024] [--json OUT]

At 128-256 requests a Qwen3-0.6B decode layer is FlashInfer's decode kernel (bandwidth-bound, ~137 / ~262 us) plus
~40 us of small kernels (norms, four GEMMs, SiLU-and-mul) that each fill a fraction of the GPU for a few us. Split
the batch in two halves A and B: while A's attention streams A's K/V, B's norms and GEMMs could run beside it, and
the other way round. This is a probe, not the engine: one layer's kernels with Qwen3-0.6B's shapes over 28 layers'
worth of separate weights and K/V (nothing stays in L2), each variant in a CUDA graph and eagerly:

  serial     the whole batch, layer by layer (what the engine does)
  halves     A then B on one stream (what the split alone costs: every GEMM twice)
  two-stream A's and B's attention one after the other on one stream, every other kernel on a second,
             higher-priority stream: attention(A, layer i) runs beside post(B, i-1) + pre(B, i), and so on
  attention  the decode kernels alone (the bound the two-stream variant approaches)

Prints ms per 28-layer step and its ratio to serial.
"""
from __future__ import annotations

import argparse
import json

import torch

Q_HEADS, KV_HEADS, HEAD_DIM, LAYERS, HIDDEN, INTER = 16, 8, 128, 28, 1024, 3072
EPS = 1e-6


def main() -> None:
    import flashinfer
    from flashinfer.activation import silu_and_mul
    from flashinfer.norm import fused_add_rmsnorm
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", default="128,256")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev, bf = torch.device("cuda"), torch.bfloat16
    qd, kvd = Q_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    w = lambda o, i: torch.randn(o, i, device=dev, dtype=bf) * 0.02
    layers = [dict(qkv=w(qd + 2 * kvd, HIDDEN), o=w(HIDDEN, qd), gu=w(2 * INTER, HIDDEN), down=w(HIDDEN, INTER),
                   n1=torch.ones(HIDDEN, device=dev, dtype=bf), n2=torch.ones(HIDDEN, device=dev, dtype=bf))
              for _ in range(LAYERS)]
    bs_max = max(int(b) for b in args.bs.split(","))
    slots = bs_max * args.ctx
    kv = [(torch.randn(slots, 1, KV_HEADS, HEAD_DIM, device=dev, dtype=bf),
           torch.randn(slots, 1, KV_HEADS, HEAD_DIM, device=dev, dtype=bf)) for _ in range(LAYERS)]
    rows = []

    def wrapper(first: int, n: int):
        """A decode wrapper over requests first..first+n-1, each on its own ctx slots (pages of one token)."""
        ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
        indptr = torch.arange(n + 1, dtype=torch.int32, device=dev) * args.ctx
        ids = torch.arange(first * args.ctx, (first + n) * args.ctx, dtype=torch.int32, device=dev)
        last = torch.ones(n, dtype=torch.int32, device=dev)
        wr = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", backend="fa2", use_cuda_graph=True,
                                                           paged_kv_indptr_buffer=indptr,
                                                           paged_kv_indices_buffer=ids, paged_kv_last_page_len_buffer=last)
        wr.plan(indptr, ids, last, num_qo_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, page_size=1,
                q_data_type=bf, kv_data_type=bf)
        return wr

    class Half:
        """One micro-batch's activations and its attention wrapper."""
        def __init__(self, first: int, n: int):
            self.h = torch.randn(n, HIDDEN, device=dev, dtype=bf)
            self.res = torch.randn(n, HIDDEN, device=dev, dtype=bf)
            self.h0, self.res0 = self.h.clone(), self.res.clone()
            self.w = wrapper(first, n)
            self.o = None

        def reset(self):
            self.h.copy_(self.h0)
            self.res.copy_(self.res0)

        def pre(self, i):  # the norm before attention and the q|k|v product
            L = layers[i]
            fused_add_rmsnorm(self.h, self.res, L["n1"], EPS)
            self.qkv = self.h @ L["qkv"].t()

        def attn(self, i):
            q = self.qkv[:, :qd].unflatten(-1, (Q_HEADS, HEAD_DIM))
            self.o = self.w.run(q, kv[i])

        def post(self, i):  # o_proj, the norm after attention, gate|up, SiLU-and-mul, down
            L = layers[i]
            a = self.o.reshape(-1, qd) @ L["o"].t()
            fused_add_rmsnorm(a, self.res, L["n2"], EPS)
            self.h = silu_and_mul(a @ L["gu"].t()) @ L["down"].t()

    def serial(halves):
        for i in range(LAYERS):
            for x in halves:  # one half: the whole batch; two: A then B, layer by layer
                x.pre(i)
                x.attn(i)
                x.post(i)

    hi, lo = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)

    def two_stream(a, b):
        """Attentions on `lo` in the order A0 B0 A1 B1 ...; every other kernel on `hi`, each half's pre(i) after its
        post(i-1); events carry the dependencies across."""
        cur = torch.cuda.current_stream()
        hi.wait_stream(cur)
        lo.wait_stream(cur)
        for i in range(LAYERS):
            for x in (a, b):
                with torch.cuda.stream(hi):
                    if i > 0:
                        hi.wait_event(x.attn_done)  # its attention of layer i - 1
                        x.post(i - 1)
                    x.pre(i)
                    ready = torch.cuda.Event()
                    ready.record(hi)
                with torch.cuda.stream(lo):
                    lo.wait_event(ready)
                    x.attn(i)
                    x.attn_done = torch.cuda.Event()
                    x.attn_done.record(lo)
        with torch.cuda.stream(hi):
            for x in (a, b):
                hi.wait_event(x.attn_done)
                x.post(LAYERS - 1)
        cur.wait_stream(hi)
        cur.wait_stream(lo)

    def attention_only(halves):
        for i in range(LAYERS):
            for x in halves:
                x.attn(i)

    def timed(fn, graph: bool, iters: int = 20) -> float:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        if graph:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            run = g.replay
        else:
            run = fn
        run()
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(iters):
            run()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1) / iters

    def final(halves):
        return torch.cat([x.h for x in halves]).float()

    print(f"{'batch':>5} {'variant':>10} {'mode':>6} {'ms/step':>8} {'/ serial':>8}", flush=True)
    for bs in (int(b) for b in args.bs.split(",")):
        whole = Half(0, bs)
        a, b = Half(0, bs // 2), Half(bs // 2, bs - bs // 2)
        for x in (a, b):  # the halves start from the whole batch's rows
            x.h0.copy_(whole.h0[:bs // 2] if x is a else whole.h0[bs // 2:])
            x.res0.copy_(whole.res0[:bs // 2] if x is a else whole.res0[bs // 2:])
        # the same arithmetic: the split and the two streams give the serial outputs (bf16 GEMMs of other shapes)
        whole.reset(), a.reset(), b.reset()
        serial([whole])
        ref = whole.h.float()
        a.reset(), b.reset()
        two_stream(a, b)
        torch.cuda.synchronize()
        err = ((final([a, b]) - ref).abs().max() / ref.abs().max()).item()
        print(f"  two-stream vs serial output: max relative error {err:.2e}", flush=True)
        for graph in (True, False):
            mode = "graph" if graph else "eager"
            t_serial = timed(lambda: serial([whole]), graph)
            got = {"serial": t_serial, "halves": timed(lambda: serial([a, b]), graph),
                   "two-stream": timed(lambda: two_stream(a, b), graph),
                   "attention": timed(lambda: attention_only([a, b]), graph)}
            for name, t in got.items():
                print(f"{bs:>5} {name:>10} {mode:>6} {t:>8.3f} {t / t_serial:>8.3f}", flush=True)
                rows.append(dict(bs=bs, variant=name, mode=mode, ms=t, vs_serial=t / t_serial, err=err))
        del whole, a, b
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
