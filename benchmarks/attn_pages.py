"""Issue 16: does FlashInfer's decode kernel read the KV cache faster in pages of 16 tokens than in the pages of one
token the engine hands it today? (Qwen3-0.6B's attention: 16 query heads, 8 KV heads, head_dim 128, bf16.)

    python benchmarks/attn_pages.py [--bs 64,128,256] [--ctx 1024] [--json OUT]

P1's decode steps sit at ~130 requests and read the KV cache at ~1.2 x its floor. The engine's FlashInfer backend
views the pool as pages of one slot (`attention/flashinfer.py`), so the kernel looks up one index per token. This
times the decode kernel alone over 28 layers' worth of separate K/V (so the 50 MB L2 holds none of it), with the same
bytes reached four ways: one-token pages in order (a fresh pool) or shuffled (a fragmented one), 16-token pages in
order or shuffled, each through the CUDA-core and the tensor-core decode kernel, for even contexts and for uneven
ones (uniform on [ctx/4, 7ctx/4]). Prints µs per layer and the KV bytes read per second.

    python benchmarks/attn_pages.py --engine-like [--bs 256] [--ctx 1025] [--json OUT]

(session 48) Why does the H200's engine graph read its K/V 4-7 % slower than this script's kernel alone (274.7
against 265.1 us a layer at 256 requests; an H100 shows no such gap)? Even contexts in order, pages of one token,
both kernels, over the same bytes laid out three ways: 28 separate K/V tensors as above ('separate'); the engine's
one pool [2, layers, slots, kv_heads, head_dim] sized like the engine's (85 % of free memory, 'pool'); and that
pool through graph-mode wrappers captured in one CUDA graph of 28 kernels ('pool+graph'), as the engine runs them,
and the same between each layer's four products ('+products': the graph's time less the products' own);
and a pool as large laid out [layers, 2, slots, ...], a layer's K and V side by side ('layer-major').
"""
from __future__ import annotations

import argparse
import json
import time

import torch

Q_HEADS, KV_HEADS, HEAD_DIM, LAYERS = 16, 8, 128, 28


def build(lens: torch.Tensor, page: int, shuffled: bool, gen: torch.Generator, dev):
    """indptr, page indices and last-page lengths for requests of `lens` tokens over a pool of `page`-token pages."""
    pages = (lens + page - 1) // page
    total = int(pages.sum())
    ids = torch.randperm(total, generator=gen) if shuffled else torch.arange(total)
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(pages, 0)
    last = (lens - (pages - 1) * page).to(torch.int32)
    return indptr.to(dev), ids.to(torch.int32).to(dev), last.to(dev), total


def time_layers(run, kv, iters: int = 5) -> float:
    """GPU seconds per layer: every layer's kernel once over its own K/V, `iters` times, between two events."""
    for layer in kv:  # warm-up (and the first launch's lazy setup)
        run(layer)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        for layer in kv:
            run(layer)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / (iters * len(kv))


def engine_like(sizes: list[int], ctx: int, dev) -> list[dict]:
    """The --engine-like question (top docstring): one row per (batch, layout, kernel)."""
    import flashinfer
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    bytes_per_token = KV_HEADS * HEAD_DIM * 2 * 2
    rows = []
    print(f"{'batch':>5} {'layout':>11} {'kernel':>11} {'us/layer':>9} {'TB/s':>6} {'pool GB':>8}", flush=True)

    def graph_time(run_layer, kv) -> float:
        """GPU seconds of one replay of a graph of run_layer over every layer."""
        for i, layer in enumerate(kv):  # warm-up outside the capture
            run_layer(i, layer)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i, layer in enumerate(kv):
                run_layer(i, layer)
        return time_layers(lambda _: g.replay(), [None], iters=30)  # ~0.3 s: long enough for the clock log

    for bs in sizes:
        lens = torch.full((bs,), ctx)
        indptr, ids, last, total = build(lens, 1, False, None, dev)
        q = torch.randn(bs, Q_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        # one decoder layer's products at bs rows, each layer its own weights (28 x 31 MB: none stays in the L2)
        wts = [[torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for n, k in
                ((4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072))] for _ in range(LAYERS)]
        acts = [torch.randn(bs, k, device=dev, dtype=torch.bfloat16) for k in (1024, 2048, 1024, 3072)]
        outs = [torch.empty(bs, n, device=dev, dtype=torch.bfloat16) for n in (4096, 1024, 6144, 1024)]

        def products(i: int, attention) -> None:
            wq, wo, wgu, wd = wts[i]
            torch.mm(acts[0], wq.t(), out=outs[0])
            if attention is not None:
                attention()
            torch.mm(acts[1], wo.t(), out=outs[1])
            torch.mm(acts[2], wgu.t(), out=outs[2])
            torch.mm(acts[3], wd.t(), out=outs[3])
        for layout in ("separate", "pool", "pool+graph", "layer-major"):
            if layout == "separate":
                kv = [(torch.randn(total, 1, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16),
                       torch.randn(total, 1, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16))
                      for _ in range(LAYERS)]
                gb = 2 * LAYERS * total * KV_HEADS * HEAD_DIM * 2 / 1e9
            elif layout in ("pool", "layer-major"):
                free, _ = torch.cuda.mem_get_info(dev)
                slots = int(free * 0.85) // (2 * LAYERS * KV_HEADS * HEAD_DIM * 2)
                shape = (2, LAYERS) if layout == "pool" else (LAYERS, 2)  # layer-major: a layer's K and V side by side
                pool = torch.empty(*shape, slots, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
                pool[:, :, :total].normal_()  # the requests' keys in order from slot 0, as a fresh engine lays them
                pick = (lambda i, j: pool[j, i]) if layout == "pool" else (lambda i, j: pool[i, j])
                kv = [(pick(i, 0).view(-1, 1, KV_HEADS, HEAD_DIM), pick(i, 1).view(-1, 1, KV_HEADS, HEAD_DIM))
                      for i in range(LAYERS)]
                gb = pool.numel() * 2 / 1e9
            for tc in (False, True):
                if layout == "pool+graph":
                    bufs = dict(use_cuda_graph=True, paged_kv_indptr_buffer=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
                                paged_kv_indices_buffer=torch.zeros(total, dtype=torch.int32, device=dev),
                                paged_kv_last_page_len_buffer=torch.ones(bs, dtype=torch.int32, device=dev))
                else:
                    bufs = {}
                w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc, backend="fa2", **bufs)
                w.plan(indptr, ids, last, num_qo_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                       page_size=1, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                out = torch.empty_like(q)
                if layout == "pool+graph":
                    t = graph_time(lambda i, layer: w.run(q, layer, out=out), kv) / LAYERS
                    # the same kernels between a layer's four products (Qwen3-0.6B's shapes, at `bs` rows), as in a
                    # decode step: the attention's time in that company is the graph's time less the products' alone
                    with_p = graph_time(lambda i, layer: products(i, lambda: w.run(q, layer, out=out)), kv)
                    only_p = graph_time(lambda i, layer: products(i, None), kv)
                    t_ctx = (with_p - only_p) / LAYERS
                    print(f"{bs:>5} {'+products':>11} {'tensor-core' if tc else 'CUDA-core':>11} {t_ctx * 1e6:>9.1f} "
                          f"{total * bytes_per_token / t_ctx / 1e12:>6.2f} {'':>8}  (products alone "
                          f"{only_p / LAYERS * 1e6:.1f} us a layer)  {time.strftime('%H:%M:%S', time.gmtime())}", flush=True)
                    rows.append(dict(bs=bs, contexts="even", page=1, order="in order", layout="pool+graph+products",
                                     kernel="tensor-core" if tc else "CUDA-core", us_per_layer=t_ctx * 1e6,
                                     tb_per_s=total * bytes_per_token / t_ctx / 1e12, kv_tokens=total, pool_gb=gb,
                                     products_us_per_layer=only_p / LAYERS * 1e6))
                else:
                    t = time_layers(lambda layer: w.run(q, layer, out=out), kv)
                tbs = total * bytes_per_token / t / 1e12
                kind = "tensor-core" if tc else "CUDA-core"
                print(f"{bs:>5} {layout:>11} {kind:>11} {t * 1e6:>9.1f} {tbs:>6.2f} {gb:>8.1f}  "
                      f"{time.strftime('%H:%M:%S', time.gmtime())}", flush=True)  # beside nvidia-smi's clock log
                rows.append(dict(bs=bs, contexts="even", page=1, order="in order", layout=layout, kernel=kind,
                                 us_per_layer=t * 1e6, tb_per_s=tbs, kv_tokens=total, pool_gb=gb))
            if layout != "pool":  # the separate tensors go before the pool; the pool goes after its graph
                kv = pool = None
                torch.cuda.empty_cache()
    return rows


def main() -> None:
    import flashinfer
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", default="64,128,256")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--json", default=None)
    ap.add_argument("--engine-like", action="store_true", help="the session-48 question (top docstring)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    sizes = [int(b) for b in args.bs.split(",")]
    if args.engine_like:
        rows = engine_like(sizes, args.ctx, dev)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    slots = (max(sizes) * (args.ctx * 7 // 4 + 16) + 31) // 16 * 16  # whole 16-token pages
    # one pool per layer, [slots, kv_heads, head_dim] like the engine's; any page size is a view of the same bytes
    kv = [(torch.randn(slots, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16),
           torch.randn(slots, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)) for _ in range(LAYERS)]
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    bytes_per_token = KV_HEADS * HEAD_DIM * 2 * 2
    rows = []
    print(f"{'batch':>5} {'contexts':>8} {'page':>4} {'order':>8} {'kernel':>11} {'us/layer':>9} {'TB/s':>6}", flush=True)
    for bs in sizes:
        gen = torch.Generator().manual_seed(bs)
        for spread in ("even", "uneven"):
            lens = torch.full((bs,), args.ctx) if spread == "even" else \
                torch.randint(args.ctx // 4, args.ctx * 7 // 4 + 1, (bs,), generator=gen)
            q = torch.randn(bs, Q_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            for page in (1, 16):
                views = [(k.view(-1, page, KV_HEADS, HEAD_DIM), v.view(-1, page, KV_HEADS, HEAD_DIM)) for k, v in kv]
                for shuffled in (False, True):
                    indptr, ids, last, _ = build(lens, page, shuffled, gen, dev)
                    for tc in (False, True):
                        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
                        w.plan(indptr, ids, last, num_qo_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                               page_size=page, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                        t = time_layers(lambda layer: w.run(q, layer), views)
                        tbs = int(lens.sum()) * bytes_per_token / t / 1e12
                        kind = "tensor-core" if tc else "CUDA-core"
                        order = "shuffled" if shuffled else "in order"
                        print(f"{bs:>5} {spread:>8} {page:>4} {order:>8} {kind:>11} {t * 1e6:>9.1f} {tbs:>6.2f}", flush=True)
                        rows.append(dict(bs=bs, contexts=spread, page=page, order=order, kernel=kind,
                                         us_per_layer=t * 1e6, tb_per_s=tbs, kv_tokens=int(lens.sum())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
