"""Issue 16, sessions 29-31: four questions about a decode layer's time on the H200, asked before building anything.

    python benchmarks/lt_probe.py [--gemm] [--head] [--attn] [--xqa] [--l2] [--skinny] [--pipe] [--cutlass] [--json OUT]

1. `--gemm`: the four products of a Qwen3-0.6B decoder layer at decode batch sizes take ~6 µs each through
   cuBLAS's own choice (session 18: 23.6 µs + a 2.1 µs split-K reduce a layer at 128 rows for 31 MB of weights, ~1.2
   TB/s). cuBLASLt offers more kernels for one shape than the one its heuristic puts first. This asks cuBLASLt's
   heuristic for up to 32 of them (through ctypes: nothing is compiled), times each over 28 layers' worth of separate
   weights inside a CUDA graph (so the L2 holds none of them), checks each against torch's product, and prints
   torch's time beside the heuristic's first and the fastest.
   `--head` (session 47) asks the same of the LM head (151,936 x 1,024), which runs inside the decode graphs now: at
   256 rows cuBLAS's kernel took 135.8 µs on the H100 (587 TFLOP/s), against 74 µs for its weights on the H200.
2. `--attn`: in CUDA-graph mode FlashInfer's planner splits every request's keys while requests x KV heads fit the
   grid (up to ~144 requests here) and merges the pieces after. Forcing the whole-KV kernel into a graph: plan with
   one-token requests (whole KV, no split), capture, then write the real page table into the same buffers. Times
   that beside the graph-mode plan, over 28 layers' K/V, contexts even and uneven.
3. `--xqa` (session 30): the H100 read its K/V at 2.88 of 3.02 TB/s through the CUDA-core kernel, but the H200's P1
   stays at 0.63 of its floor where the H100's reached 0.71: is it the kernel's reach on the faster memory? Times
   TensorRT-LLM's XQA decode kernel (FlashInfer 0.5's `xqa_batch_decode_with_kv_cache`: no planner, it splits long
   sequences across CTAs itself; pages of 16 tokens; prebuilt here for sm_90a) beside the engine's two graph kernels
   over the same bytes: CUDA-core over one-token pages (the default) and tensor-core over pages of 16 (the balanced
   graphs at page_size 16), batch 1 to 256, contexts even and uneven.
4. `--l2` (session 31): a decode layer's four products take ~6 µs each whatever their rows, about half the copy
   bandwidth on the H100 and less on the H200. Are they slow for the bytes or for the latency? Times them with their
   weights cold, hot (one layer's weights, which the L2 holds), and cold with the next products' weights read into
   the L2 on a second stream meanwhile (a sum, or benchmarks/kernels/l2_prefetch.cu's prefetch, plain or evict_last),
   with and without an attention stand-in reading K/V between them.
5. `--skinny` (session 34): the products at 16-128 rows take ~5-6 µs each where their weights alone take 1-3 µs at the
   copy rate. minisgl_edu/model/skinny_gemm.cu puts every weight byte of a slice in flight before it waits on the
   kernel before it (programmatic dependent launch), then multiplies on the tensor cores (mma.m16n8k16) with x's
   slice in shared memory, split-K across blocks with a deterministic last-block sum. Checks it against a float
   product, times every built (feature groups a warp, slice, warps) configuration with PDL on and off beside torch's product over 28
   layers' separate weights in a CUDA graph, then the four products of a layer in a row, as a layer runs them.
   Session 36 adds `--skinny-kinds p`: skinny with x copied in groups and more than one accumulator chain. (Session
   35's skinny_t, the operands swapped, was timed in session 36, slower at every size, and removed: git 5384fd0.)
6. `--pipe` (session 37): skinny grows with the rows because each block loads, then waits for all of x, then
   multiplies. benchmarks/kernels/pipe_gemm.cu streams W and x through a ring of shared-memory stages (cp.async,
   ldmatrix, mma.m16n8k16; 8 stages for some), the first stages' weights (and, with PF, an L2 prefetch of the rest) requested before
   the PDL wait. Times every built (rows, warp layout, features a block, K slices, PF) that gives 96-400 blocks, with
   PDL, beside torch, at 16-256 rows; then the best of each product as a layer, PDL on and off.
7. `--cutlass` (session 37, built, not yet run): CUTLASS 4.2's Hopper GEMM with the operands swapped (the features as
   the wgmma's M, the rows as its N; benchmarks/kernels/cutlass_swap_ab.cu, a host library built here), x multicast
   across a cluster of 2 or the work split along K by stream-K, each variant PDL off and on, at 16-256 rows. Each
   variant twice (session 39): as is, and as *_pf, whose load warp prefetches its weight tiles into the L2 (TMA)
   before the PDL wait, so that they stream in while the kernel before still runs.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys

import torch

# ---- cuBLASLt through ctypes ------------------------------------------------------------------------------------
COMPUTE_32F, R_16BF, R_32F = 68, 14, 0  # cublasComputeType_t / cudaDataType values (cublas_api.h, library_types.h)
DESC_TRANSA, DESC_TRANSB, OP_N, OP_T = 3, 4, 0, 1
PREF_MAX_WORKSPACE = 1


class Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class Heuristic(ctypes.Structure):
    _fields_ = [("algo", Algo), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


def load_lt():
    try:
        return ctypes.CDLL("libcublasLt.so.13")  # torch has loaded it already: found by its soname
    except OSError:
        for p in sys.path:
            for f in glob.glob(os.path.join(p, "nvidia", "*", "lib", "libcublasLt.so*")):
                return ctypes.CDLL(f)
    raise OSError("libcublasLt not found")


def ok(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: cublas status {rc}")


class Lt:
    """y[M, N] = x[M, K] @ w[N, K].T in bf16 (float32 accumulate), column-major: D(N x M) = op_T(W: K x N) @ X(K x M)."""

    def __init__(self, device, workspace_mb: int = 32):
        self.lib = load_lt()
        self.h = ctypes.c_void_p()
        ok(self.lib.cublasLtCreate(ctypes.byref(self.h)), "cublasLtCreate")
        self.ws = torch.empty(workspace_mb << 20, dtype=torch.uint8, device=device)
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.cache = {}

    def descs(self, m, n, k):
        if (m, n, k) not in self.cache:
            lib, d = self.lib, ctypes.c_void_p()
            ok(lib.cublasLtMatmulDescCreate(ctypes.byref(d), COMPUTE_32F, R_32F), "DescCreate")
            for attr, val in ((DESC_TRANSA, OP_T), (DESC_TRANSB, OP_N)):
                v = ctypes.c_int32(val)
                ok(lib.cublasLtMatmulDescSetAttribute(d, attr, ctypes.byref(v), 4), "DescSetAttribute")
            lay = []
            for rows, cols, ld in ((k, n, k), (k, m, k), (n, m, n)):
                L = ctypes.c_void_p()
                ok(lib.cublasLtMatrixLayoutCreate(ctypes.byref(L), R_16BF, ctypes.c_uint64(rows), ctypes.c_uint64(cols),
                                                  ctypes.c_int64(ld)), "LayoutCreate")
                lay.append(L)
            self.cache[m, n, k] = (d, *lay)
        return self.cache[m, n, k]

    def algos(self, m, n, k, count=32):
        d, a, b, c = self.descs(m, n, k)
        pref = ctypes.c_void_p()
        ok(self.lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "PreferenceCreate")
        size = ctypes.c_uint64(self.ws.numel())
        ok(self.lib.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, ctypes.byref(size), 8), "PrefSet")
        res, got = (Heuristic * count)(), ctypes.c_int(0)
        ok(self.lib.cublasLtMatmulAlgoGetHeuristic(self.h, d, a, b, c, c, pref, count, res, ctypes.byref(got)),
           "AlgoGetHeuristic")
        return [res[i] for i in range(got.value) if res[i].state == 0]

    def mm(self, x, w, out, algo: Heuristic):
        m, k = x.shape
        n = w.shape[0]
        d, a, b, c = self.descs(m, n, k)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        ok(self.lib.cublasLtMatmul(self.h, d, ctypes.byref(self.alpha), ctypes.c_void_p(w.data_ptr()), a,
                                   ctypes.c_void_p(x.data_ptr()), b, ctypes.byref(self.beta),
                                   ctypes.c_void_p(out.data_ptr()), c, ctypes.c_void_p(out.data_ptr()), c,
                                   ctypes.byref(algo.algo), ctypes.c_void_p(self.ws.data_ptr()),
                                   ctypes.c_size_t(self.ws.numel()), stream), "Matmul")


def graph_time(fn, layers: int, iters: int = 20) -> float:
    """µs per call of fn(i) for i over `layers`, all captured in one CUDA graph and replayed `iters` times."""
    for i in range(layers):
        fn(i)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(layers):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        g.replay()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3 / (iters * layers)


SHAPES = {"qkv": (4096, 1024), "o_proj": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)}  # (N, K)
HEAD = {"lm_head": (151936, 1024)}  # --head: Qwen3-0.6B's LM head, inside the decode graphs since session 47


def gemm_probe(sizes, layers=28, shapes=SHAPES):
    dev = torch.device("cuda")
    lt = Lt(dev)
    rows = []
    gen = torch.Generator(device=dev).manual_seed(0)
    for name, (n, k) in shapes.items():
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.03 for _ in range(layers)]
        for m in sizes:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            ref = (x.float() @ ws[0].float().T)
            t_torch = graph_time(lambda i: torch.mm(x, ws[i].T, out=out), layers)
            cands = lt.algos(m, n, k)
            times = []
            for j, h in enumerate(cands):
                try:
                    lt.mm(x, ws[0], out, h)
                    torch.cuda.synchronize()
                    err = float((out.float() - ref).norm() / ref.norm())
                    t = graph_time(lambda i: lt.mm(x, ws[i], out, h), layers)
                except RuntimeError as exc:  # an algo the graph or the launch refuses: skipped, said
                    print(f"  {name} m={m} algo {j}: {exc}", flush=True)
                    continue
                times.append((t, j, err, h.workspace, h.waves))
            best = min(times) if times else (float("nan"), -1, float("nan"), 0, 0.0)
            first = next((t for t in times if t[1] == 0), best)
            row = dict(gemm=name, m=m, n=n, k=k, torch_us=t_torch, lt_first_us=first[0], lt_best_us=best[0],
                       best_index=best[1], best_rel_err=best[2], best_workspace=best[3], best_waves=best[4],
                       candidates=len(cands), weights_tb_s_torch=n * k * 2 / t_torch / 1e6,
                       weights_tb_s_best=n * k * 2 / best[0] / 1e6)
            rows.append(row)
            print(f"{name:>8} m={m:>4}: torch {t_torch:6.2f} µs | Lt first {first[0]:6.2f} | best {best[0]:6.2f} "
                  f"(#{best[1]} of {len(cands)}, err {best[2]:.1e}, ws {best[3] >> 10} KiB, waves {best[4]:.2f})",
                  flush=True)
        del ws
        torch.cuda.empty_cache()
    for m in sizes if shapes is SHAPES else ():
        if m == sizes[0]:
            print("\nper layer (four products), µs:")
        sel = [r for r in rows if r["m"] == m]
        print(f"  m={m:>4}: torch {sum(r['torch_us'] for r in sel):6.1f}  Lt best {sum(r['lt_best_us'] for r in sel):6.1f}",
              flush=True)
    return rows


# ---- decode attention: graph-mode plan vs the whole-KV kernel forced into a graph ---------------------------------
Q_HEADS, KV_HEADS, HEAD_DIM = 16, 8, 128


def attn_probe(sizes, ctx=1024, layers=28):
    import flashinfer
    dev = torch.device("cuda")
    slots = max(sizes) * (ctx * 7 // 4 + 1)
    kv = [(torch.randn(slots, 1, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16),
           torch.randn(slots, 1, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)) for _ in range(layers)]
    rows = []
    for bs in sizes:
        gen = torch.Generator().manual_seed(bs)
        for spread in ("even", "uneven"):
            lens = torch.full((bs,), ctx) if spread == "even" else \
                torch.randint(ctx // 4, ctx * 7 // 4 + 1, (bs,), generator=gen)
            indptr = torch.zeros(bs + 1, dtype=torch.int32)
            indptr[1:] = torch.cumsum(lens, 0)
            ids = torch.randperm(int(lens.sum()), generator=gen).to(torch.int32).to(dev)
            last = torch.ones(bs, dtype=torch.int32)
            q = torch.randn(bs, Q_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            kw = dict(num_qo_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, page_size=1,
                      q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
            def graph_wrapper(n, tc=False):
                buf = (torch.empty(n + 1, dtype=torch.int32, device=dev), torch.empty(slots, dtype=torch.int32, device=dev),
                       torch.empty(n, dtype=torch.int32, device=dev))
                return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    torch.empty(64 << 20, dtype=torch.uint8, device=dev), "NHD", use_cuda_graph=True, use_tensor_cores=tc,
                    paged_kv_indptr_buffer=buf[0], paged_kv_indices_buffer=buf[1], paged_kv_last_page_len_buffer=buf[2],
                    backend="fa2")
            # (a) the engine's way: graph-mode wrapper with fixed buffers, planned on the real lengths
            wa = graph_wrapper(bs)
            wa.plan(indptr, ids, last, **kw)
            out_a = torch.empty_like(q)
            t_a = graph_time(lambda i: wa.run(q, kv[i], out=out_a), layers)
            wa.run(q, kv[0], out=out_a)
            torch.cuda.synchronize()
            ref = out_a.clone()

            def err_of(o):
                torch.cuda.synchronize()
                return float((o.float() - ref.float()).norm() / ref.float().norm())
            # (b) whole KV: a non-graph wrapper planned for one-token requests (no split), then the real page table
            wb = flashinfer.BatchDecodeWithPagedKVCacheWrapper(torch.empty(64 << 20, dtype=torch.uint8, device=dev),
                                                               "NHD", backend="fa2")
            fake_indptr = torch.arange(bs + 1, dtype=torch.int32, device=dev)
            fake_last = torch.ones(bs, dtype=torch.int32, device=dev)
            wb.plan(fake_indptr, ids, fake_last, **kw)
            split_b = list(wb._plan_info)
            fake_indptr.copy_(indptr)  # the wrapper holds these very tensors: the real page table, no re-plan
            out_b = torch.empty_like(q)
            wb.run(q, kv[0], out=out_b)
            err = err_of(out_b)
            t_b = graph_time(lambda i: wb.run(q, kv[i], out=out_b), layers)
            # (c) the tensor-core decode kernel in graph mode (the engine's balanced graphs)
            wc = graph_wrapper(bs, tc=True)
            wc.plan(indptr, ids, last, **kw)
            out_c = torch.empty_like(q)
            wc.run(q, kv[0], out=out_c)
            err_c = err_of(out_c)
            t_c = graph_time(lambda i: wc.run(q, kv[i], out=out_c), layers)
            # (d) two halves, each its own graph-mode CUDA-core plan (each half splits its keys to fill the grid)
            h = bs // 2
            halves = []
            for lo, hi in ((0, h), (h, bs)):
                w = graph_wrapper(hi - lo)
                w.plan(indptr[lo:hi + 1] - indptr[lo], ids[int(indptr[lo]):int(indptr[hi])], last[lo:hi], **kw)
                halves.append((w, lo, hi))
            out_d = torch.empty_like(q)

            def run_d(i):
                for w, lo, hi in halves:
                    w.run(q[lo:hi], kv[i], out=out_d[lo:hi])
            run_d(0)
            err_d = err_of(out_d)
            t_d = graph_time(run_d, layers)
            gb = int(lens.sum()) * KV_HEADS * HEAD_DIM * 4 / 1e9
            row = dict(bs=bs, contexts=spread, graph_plan_us=t_a, whole_kv_us=t_b, tensor_core_us=t_c, halves_us=t_d,
                       rel_err=err, rel_err_tc=err_c, rel_err_halves=err_d, kv_gb=gb,
                       plan_info_graph=list(wa._plan_info), plan_info_whole=split_b)
            rows.append(row)
            tb = lambda t: f"{t:7.1f} µs ({gb / t * 1e3:4.2f} TB/s)"
            print(f"attn bs={bs:>4} {spread:>6}: CUDA-core graph {tb(t_a)} | whole KV {tb(t_b)} | tensor-core {tb(t_c)} "
                  f"| halves {tb(t_d)} | errs {err:.0e} {err_c:.0e} {err_d:.0e} | split {wa._plan_info[9]}", flush=True)
            del wa, wb, wc, halves
    return rows


def xqa_probe(sizes, ctx=1024, layers=28, page=16):
    import flashinfer
    from flashinfer.decode import xqa_batch_decode_with_kv_cache
    dev = torch.device("cuda")
    per_req = (ctx * 7 // 4 + page) // page  # pages of the longest request
    pages = max(sizes) * per_req
    kv = [(torch.randn(pages, page, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16),
           torch.randn(pages, page, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)) for _ in range(layers)]
    slots = [(k.view(-1, 1, KV_HEADS, HEAD_DIM), v.view(-1, 1, KV_HEADS, HEAD_DIM)) for k, v in kv]  # one-token pages
    ws_x = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)  # XQA: 8 MiB of semaphores, then scratch (zeroed once)
    rows = []
    for bs in sizes:
        gen = torch.Generator().manual_seed(bs)
        for spread in ("even", "uneven"):
            lens = torch.full((bs,), ctx) if spread == "even" else \
                torch.randint(ctx // 4, ctx * 7 // 4 + 1, (bs,), generator=gen)
            npg = (lens + page - 1) // page
            perm = torch.randperm(pages, generator=gen)[:int(npg.sum())].to(torch.int32)  # pages scattered
            pindptr = torch.zeros(bs + 1, dtype=torch.int32)
            pindptr[1:] = torch.cumsum(npg, 0)
            last = (lens - (npg - 1) * page).to(torch.int32)
            table = torch.zeros(bs, per_req, dtype=torch.int32)
            for r in range(bs):
                table[r, :npg[r]] = perm[pindptr[r]:pindptr[r + 1]]
            # the same tokens slot by slot: page p's token j is slot p * page + j
            sids = torch.cat([(table[r, :npg[r], None] * page + torch.arange(page, dtype=torch.int32)).flatten()[:lens[r]]
                              for r in range(bs)]).to(dev)
            sindptr = torch.zeros(bs + 1, dtype=torch.int32)
            sindptr[1:] = torch.cumsum(lens, 0)
            q = torch.randn(bs, Q_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            kw = dict(num_qo_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                      q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)

            def graph_wrapper(n, nidx, tc):
                return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    torch.empty(64 << 20, dtype=torch.uint8, device=dev), "NHD", use_cuda_graph=True, use_tensor_cores=tc,
                    paged_kv_indptr_buffer=torch.empty(n + 1, dtype=torch.int32, device=dev),
                    paged_kv_indices_buffer=torch.empty(nidx, dtype=torch.int32, device=dev),
                    paged_kv_last_page_len_buffer=torch.empty(n, dtype=torch.int32, device=dev), backend="fa2")
            # (a) the default: CUDA-core kernel, graph plan, one-token pages
            wa = graph_wrapper(bs, len(sids), False)
            wa.plan(sindptr, sids, torch.ones(bs, dtype=torch.int32), page_size=1, **kw)
            out_a = torch.empty_like(q)
            wa.run(q, slots[0], out=out_a)
            torch.cuda.synchronize()
            ref = out_a.float().clone()

            def err_of(o):
                torch.cuda.synchronize()
                return float((o.float() - ref).norm() / ref.norm())
            t_a = graph_time(lambda i: wa.run(q, slots[i], out=out_a), layers)
            # (b) tensor-core kernel, graph plan, pages of 16
            wb = graph_wrapper(bs, int(npg.sum()), True)
            wb.plan(pindptr, perm.to(dev), last, page_size=page, **kw)
            out_b = torch.empty_like(q)
            wb.run(q, kv[0], out=out_b)
            err_b = err_of(out_b)
            t_b = graph_time(lambda i: wb.run(q, kv[i], out=out_b), layers)
            # (c) XQA over pages of 16: a page table and the lengths, nothing planned
            tab, sl = table.to(dev), lens.to(torch.uint32).to(dev)
            out_c = torch.empty_like(q)

            def run_c(i):
                xqa_batch_decode_with_kv_cache(q, kv[i], ws_x, tab, sl, per_req * page, bmm1_scale=HEAD_DIM ** -0.5,
                                               out=out_c)
            run_c(0)
            err_c = err_of(out_c)
            t_c = graph_time(run_c, layers)
            # (d) the same with the table as wide as an engine's would be (Qwen3's 40,960 positions: 2,560 pages), since
            # XQA sizes its split of each sequence from the table's width, not from the lengths
            wide = torch.zeros(bs, 40960 // page, dtype=torch.int32, device=dev)
            wide[:, :per_req] = tab
            out_d = torch.empty_like(q)

            def run_d(i):
                xqa_batch_decode_with_kv_cache(q, kv[i], ws_x, wide, sl, 40960, bmm1_scale=HEAD_DIM ** -0.5, out=out_d)
            run_d(0)
            err_d = err_of(out_d)
            t_d = graph_time(run_d, layers)
            gb = int(lens.sum()) * KV_HEADS * HEAD_DIM * 4 / 1e9
            row = dict(bs=bs, contexts=spread, cuda_core_us=t_a, tensor_core_p16_us=t_b, xqa_p16_us=t_c, xqa_wide_us=t_d,
                       kv_gb=gb, rel_err_tc=err_b, rel_err_xqa=err_c, rel_err_wide=err_d)
            rows.append(row)
            tb = lambda t: f"{t:7.1f} µs ({gb / t * 1e3:4.2f} TB/s)"
            print(f"xqa bs={bs:>4} {spread:>6}: CUDA-core p1 {tb(t_a)} | tensor-core p16 {tb(t_b)} | XQA p16 {tb(t_c)} "
                  f"| XQA wide table {tb(t_d)} | errs {err_b:.0e} {err_c:.0e} {err_d:.0e}", flush=True)
            del wa, wb
    return rows


def l2_probe(sizes, layers=28, ctx=1024):
    """Weights read into the L2 ahead of their products: does a product whose weights the L2 already holds take less
    than its ~6 µs? Each layer: qkv, an attention stand-in (a float32 sum over the K/V bytes of `m` requests of `ctx`
    tokens, as many bytes as the decode kernel reads), o_proj, gate_up, down; 28 layers' worth of separate weights and
    K/V in one CUDA graph. Variants: the weights cold; hot (one layer's weights 28 times, which the L2 keeps); and
    cold with a second stream reading ahead, joined at the layer's end: 'sum' (a float32 sum over gate_up, down and
    the next qkv, from o_proj on), 'pf' (benchmarks/kernels/l2_prefetch.cu's prefetch of the same, from o_proj on),
    'last' (its evict_last prefetch of o_proj, gate_up, down and the next qkv from qkv on, before the attention's
    stream, after putting the weights used since the last such fork back to normal priority)."""
    from minisgl_edu.model import qk_kernel
    from minisgl_edu.paging import cdiv
    dev = torch.device("cuda")
    qk_kernel.CUBINS["l2_prefetch"] = "l2_prefetch.cubin"  # built by scripts/build_fi_extra_kernels.sh
    have_pf = qk_kernel._kernel(dev, "l2_prefetch") is not None
    w = [{n: torch.randn(nk, device=dev, dtype=torch.bfloat16) * 0.02 for n, nk in SHAPES.items()} for _ in range(layers + 1)]
    kv_tok = KV_HEADS * HEAD_DIM * 2  # K and V elements a token a layer
    kv = torch.empty(layers, max(sizes) * ctx * kv_tok, device=dev, dtype=torch.bfloat16).normal_()
    side = torch.cuda.Stream(dev)
    sink = torch.zeros(layers, 8, device=dev, dtype=torch.float32)

    waves = 2 * torch.cuda.get_device_properties(dev).multi_processor_count  # two blocks an SM, grid-stride beyond

    def prefetch(t, mode):
        lines = t.numel() * t.element_size() // 128
        qk_kernel._launch("l2_prefetch", dev, min(cdiv(lines, 256), waves), 256,
                          [qk_kernel._ptr(t), ctypes.c_ulonglong(t.numel() * t.element_size()), ctypes.c_int(mode)])
    rows = []
    for m in sizes:
        x = {n: torch.randn(m, k, device=dev, dtype=torch.bfloat16) for n, (_, k) in SHAPES.items()}
        y = {n: torch.empty(m, nn, device=dev, dtype=torch.bfloat16) for n, (nn, _) in SHAPES.items()}
        kvm = kv[:, :m * ctx * kv_tok]

        def gemm(i, n):
            torch.mm(x[n], w[i][n].t(), out=y[n])

        def ahead(i, todo, mode):  # on the side stream, forked from here
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                for k, (j, n) in enumerate(todo):
                    if mode == "sum":
                        torch.sum(w[j][n].view(-1), 0, dtype=torch.float32, out=sink[i, 1 + k])
                    else:
                        prefetch(w[j][n], mode)

        def layer(i, attn=True, pf=None, hot=False):
            j = 0 if hot else i
            gemm(j, "qkv")
            if pf == "last":  # the weights used since the last fork back to normal priority, then the next ones
                if i:
                    ahead(i, ((j - 1, "o_proj"), (j - 1, "gate_up"), (j - 1, "down"), (j, "qkv")), 2)
                ahead(i, ((j, "o_proj"), (j, "gate_up"), (j, "down"), (j + 1, "qkv")), 1)
            if attn:
                torch.sum(kvm[i], 0, dtype=torch.float32, out=sink[i, 0])
            if pf in ("sum", "pf"):
                ahead(i, ((j, "gate_up"), (j, "down"), (j + 1, "qkv")), "sum" if pf == "sum" else 0)
            gemm(j, "o_proj")
            gemm(j, "gate_up")
            gemm(j, "down")
            if pf:
                torch.cuda.current_stream(dev).wait_stream(side)
        variants = {"gemms_cold": dict(attn=False), "gemms_hot": dict(attn=False, hot=True),
                    "gemms_sum": dict(attn=False, pf="sum"), "layer": {}, "layer_sum": dict(pf="sum")}
        if have_pf:
            variants |= {"gemms_pf": dict(attn=False, pf="pf"), "layer_pf": dict(pf="pf"), "layer_last": dict(pf="last")}
        t = {name: graph_time(lambda i, kw=kw: layer(i, **kw), layers) for name, kw in variants.items()}
        t["attn_alone"] = graph_time(lambda i: torch.sum(kvm[i], 0, dtype=torch.float32, out=sink[i, 0]), layers)
        kvb = m * ctx * kv_tok * 2
        floor = (sum(n * k for n, k in SHAPES.values()) * 2 + kvb) / 1e6  # a layer's bytes / 1e6 = µs at 1 TB/s
        rows.append(dict(m=m, ctx=ctx, **t, layer_mb=floor))
        print(f"l2 m={m:>4} (floor {floor / 4.2:6.1f} µs at the H200's 4.2 TB/s, attn stand-in {t['attn_alone']:6.1f} µs = "
              f"{kvb / t['attn_alone'] / 1e6:4.2f} TB/s): " + " | ".join(f"{k} {v:6.1f}" for k, v in t.items()
                                                                          if k != "attn_alone"), flush=True)
    return rows


SKINNY_MT = (1, 2, 4, 6, 8)  # 16-row tiles skinny_gemm.cu is built for (m <= 128)


SKINNY_NJ = ((1, 4), (1, 8), (1, 16), (2, 4), (2, 8), (4, 4), (1, 32))  # (NT, J) built; (1, 32): K = 1024 unsplit




def skinny_tiles(m: int) -> int:
    return next(v for v in SKINNY_MT if 16 * v >= m)


def skinny_configs(n: int, k: int, m: int, kinds: str = "n,p"):
    """(NT, J, warps, groups, accumulators) of skinny_gemm.cu that tile [n, k]: K slices of 32 J, 8 NT warps features
    a block; n: one accumulator chain, x copied at once; p: x copied in groups and more than one accumulator chain
    (session 36; qk_kernel.SKINNY_GA_BUILT)."""
    from minisgl_edu.model.qk_kernel import SKINNY_GA_BUILT
    plain = [(nt, j, w, 1, 1) for nt, j in SKINNY_NJ for w in (4, 8) if k % (32 * j) == 0 and n % (8 * nt * w) == 0
             and 16 * skinny_tiles(m) * (32 * j + 32) * 2 <= 227 * 1024]  # x slice fits
    piped = [(1, j, 8, g, a) for j in (8, 16, 32) for g, a in SKINNY_GA_BUILT if (g, a) != (1, 1)
             and k % (32 * j) == 0 and n % 64 == 0
             and m <= 64 and 16 * skinny_tiles(m) * (32 * j + 32) * 2 <= 227 * 1024]
    kinds_ = kinds.split(",")
    return (plain if "n" in kinds_ else []) + (piped if "p" in kinds_ else [])


class Skinny:
    """skinny_gemm.cu's kernels through the library's cubin launcher, with their workspace and tickets."""

    def __init__(self, dev):
        from minisgl_edu.model import qk_kernel
        self.qk, self.dev = qk_kernel, dev
        self.ws = torch.empty(32 * 128 * 6144, device=dev, dtype=torch.float32)
        self.tickets = torch.zeros(4096, device=dev, dtype=torch.int32)

    def available(self) -> bool:  # the loader finds every skinny_* kernel in skinny_gemm.cubin
        return self.qk._kernel(self.dev, self.qk.skinny_name(1, 1, 4, 4)) is not None

    def mm(self, x, w_, out, nt: int, j: int, warps: int, pdl: bool, g: int = 1, a: int = 1):
        m, k = x.shape
        mt = skinny_tiles(m)
        assert k // (32 * j) * m * w_.shape[0] <= self.ws.numel() and m <= 128
        self.qk.skinny_launch(x, w_, out, self.ws, self.tickets, j, warps, mt, nt, pdl, g, a)


def product_probe(tag: str, sizes, configs, mm, label, fields, modes=(False, True), dev=None, layers: int = 28):
    """The probes of our product kernels (--skinny, --pipe): for each row count and each of a layer's products, torch's
    time, then each configuration from configs(n, k, m): launched plainly then with PDL (mm(x, w, out, cfg, pdl)),
    checked against a float product (rel. err. < 2e-2) and launch to launch (bit-equal), and timed over `layers`
    layers' separate weights in a CUDA graph with each PDL mode in `modes`; the fastest good one with PDL is the
    product's best. Then the four bests in a row as a layer, against torch's four. fields(cfg): what each
    configuration's JSON row names; label(cfg): its short name in the printout."""
    dev = dev or torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    w = {name: [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.03 for _ in range(layers)]
         for name, (n, k) in SHAPES.items()}
    ok_ = lambda r: r["err"] < 2e-2 and r["repeat_equal"]  # noqa: E731
    rows = []
    for m in sizes:
        best = {}
        for name, (n, k) in SHAPES.items():
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            ref = x.float() @ w[name][0].float().T
            torch.mm(x, w[name][0].T, out=out)
            err_torch = float((out.float() - ref).norm() / ref.norm())
            t_torch = graph_time(lambda i: torch.mm(x, w[name][i].T, out=out), layers)
            res = []
            for c in configs(n, k, m):
                out.fill_(float("nan"))
                mm(x, w[name][0], out, c, False)
                first = out.clone()
                mm(x, w[name][0], out, c, True)
                torch.cuda.synchronize()
                r = dict(fields(c), cfg=list(c), err=float((out.float() - ref).norm() / ref.norm()),
                         repeat_equal=bool(torch.equal(first, out)))
                for pdl in modes:
                    r["us_pdl" if pdl else "us"] = graph_time(lambda i: mm(x, w[name][i], out, c, pdl), layers)
                res.append(r)
            good = [r for r in res if ok_(r)]
            best[name] = min(good, key=lambda r: r["us_pdl"]) if good else None
            rows.append(dict(gemm=name, m=m, n=n, k=k, torch_us=t_torch, torch_err=err_torch, configs=res,
                             best=best[name]))
            cfg = " | ".join(f"{label(tuple(r['cfg']))} " + "/".join(f"{r[u]:5.2f}" for u in ("us", "us_pdl") if u in r)
                             + ("" if ok_(r) else f" BAD(err {r['err']:.1e}, rep {r['repeat_equal']})")
                             for r in sorted(res, key=lambda r: r["us_pdl"]))
            print(f"{tag} {name:>8} m={m:>4}: torch {t_torch:6.2f} µs (err {err_torch:.1e}), weights at 4.2 TB/s "
                  f"{n * k * 2 / 4.2e6:5.2f} | ours {'plain/' * (False in modes)}pdl, fastest first: {cfg}", flush=True)
        if all(best.values()):  # the four in a row, as a layer runs them (each its own input: only the order matters)
            xs = {name: torch.randn(m, k, device=dev, dtype=torch.bfloat16) for name, (n, k) in SHAPES.items()}
            ys = {name: torch.empty(m, n, device=dev, dtype=torch.bfloat16) for name, (n, k) in SHAPES.items()}

            def layer(i, how):
                for name in SHAPES:
                    if how == "torch":
                        torch.mm(xs[name], w[name][i].T, out=ys[name])
                    else:
                        mm(xs[name], w[name][i], ys[name], tuple(best[name]["cfg"]), how == "pdl")
            t = {how: graph_time(lambda i, how=how: layer(i, how), layers) for how in ("torch", "plain", "pdl")}
            floor = sum(n * k for n, k in SHAPES.values()) * 2 / 4.2e6
            rows.append(dict(gemm="layer", m=m, **{f"{h}_us": v for h, v in t.items()}, floor_us=floor,
                             best={nm: label(tuple(b["cfg"])) for nm, b in best.items()}))
            print(f"{tag} layer m={m:>4}: torch {t['torch']:6.2f} µs | ours plain {t['plain']:6.2f} | ours pdl "
                  f"{t['pdl']:6.2f} | weights at 4.2 TB/s {floor:5.2f} | "
                  + " ".join(f"{nm} {label(tuple(b['cfg']))}" for nm, b in best.items()), flush=True)
    return rows


def skinny_probe(sizes, layers=28, kinds="n,p", dev=None):
    dev = dev or torch.device("cuda")
    sk = Skinny(dev)
    if not sk.available():
        print("skinny: no skinny_gemm.cubin (scripts/build_fi_extra_kernels.sh)", flush=True)
        return []
    return product_probe(
        "skinny", sizes, lambda n, k, m: skinny_configs(n, k, m, kinds),
        lambda x, w_, out, c, pdl: sk.mm(x, w_, out, c[0], c[1], c[2], pdl, c[3], c[4]),
        lambda c: f"n{c[0]}j{c[1]}w{c[2]}" + (f"g{c[3]}a{c[4]}" if (c[3], c[4]) != (1, 1) else ""),
        lambda c: dict(zip(("nt", "j", "warps", "g", "a"), c)), dev=dev, layers=layers)


PIPE_MT = (2, 4, 8, 16)  # 16-row tiles pipe_gemm.cu is built for (m <= 256)
PIPE_LAYOUTS = ((2, 2, 2), (2, 2, 3), (2, 2, 4), (4, 1, 4), (4, 1, 6), (4, 1, 8))  # (WM, WN, NTW) built; 4x1 at MT % 4 == 0
PIPE_ST8 = ((2, 2, 2, 2), (4, 2, 2, 2), (8, 2, 2, 2), (4, 4, 1, 4), (8, 4, 1, 4), (4, 4, 1, 6), (8, 4, 1, 6),
            (2, 2, 2, 3))  # (MT, WM, WN, NTW) built with 8 stages as well as 4
PIPE_BK = 64


def pipe_configs(n: int, k: int, m: int):
    """(MT, WM, WN, NTW, stages, slices, PF) of pipe_gemm.cu for [n, k] at m rows: whole feature tiles, K slices of
    whole 64-wide k-blocks, 96-400 blocks (132 SMs)."""
    mt = next(v for v in PIPE_MT if 16 * v >= m)
    out = []
    for wm, wn, ntw in PIPE_LAYOUTS:
        bn = 8 * ntw * wn
        if mt % wm or n % bn:
            continue
        for st in (4, 8) if (mt, wm, wn, ntw) in PIPE_ST8 else (4,):
            for s in (1, 2, 3, 4):
                if k % (s * PIPE_BK) == 0 and 96 <= n // bn * s <= 400:
                    out += [(mt, wm, wn, ntw, st, s, pf) for pf in (0, 1)]
    return out


def pipe_name(mt, wm, wn, ntw, st, pf) -> str:
    return f"pipe_m{mt}_w{wm}x{wn}_n{ntw}_s{st}_p{pf}"


class Pipe:
    """pipe_gemm.cu's kernels through the library's cubin launcher, with a float workspace and tickets."""

    def __init__(self, dev):
        from minisgl_edu.model import qk_kernel
        self.qk, self.dev = qk_kernel, dev
        self.ws = torch.empty(4 * 256 * 6144, device=dev, dtype=torch.float32)
        self.tickets = torch.zeros(4096, device=dev, dtype=torch.int32)

    def name(self, mt, wm, wn, ntw, st, pf) -> str:
        name = pipe_name(mt, wm, wn, ntw, st, pf)
        self.qk.CUBINS[name] = "pipe_gemm.cubin"  # built by scripts/build_fi_extra_kernels.sh
        return name

    def available(self) -> bool:
        return self.qk._kernel(self.dev, self.name(2, 2, 2, 2, 4, 0)) is not None

    def mm(self, x, w_, out, cfg, pdl: bool = True):
        (m, k), n = x.shape, w_.shape[0]
        mt, wm, wn, ntw, st, s, pf = cfg
        name, bn = self.name(mt, wm, wn, ntw, st, pf), 8 * ntw * wn
        assert m <= 16 * mt and s * m * n <= self.ws.numel() and n // bn <= self.tickets.numel()
        shared = st * (bn + 16 * mt) * (PIPE_BK + 8) * 2  # more than 48 KB: the launcher opts the kernel in
        p = self.qk._ptr
        self.qk._launch(name, self.dev, (n // bn, s), 32 * wm * wn,
                        [p(x), ctypes.c_int(m), p(w_), ctypes.c_int(n), ctypes.c_int(k), p(out), p(self.ws),
                         p(self.tickets)], shared=shared, pdl=pdl)


def cfg_name(c) -> str:
    mt, wm, wn, ntw, st, s, pf = c
    return f"m{mt}w{wm}x{wn}n{ntw}st{st}s{s}p{pf}"


def pipe_probe(sizes, layers=28, dev=None):
    dev = dev or torch.device("cuda")
    pp = Pipe(dev)
    if not pp.available():
        print("pipe: no pipe_gemm.cubin (scripts/build_fi_extra_kernels.sh)", flush=True)
        return []
    return product_probe("pipe", sizes, pipe_configs, pp.mm, cfg_name, lambda c: {}, modes=(True,), dev=dev,
                         layers=layers)


class Cutlass:
    """benchmarks/kernels/cutlass_swap_ab.cu's host libraries (cutlass_swap_ab.so and, since session 39, its twin
    cutlass_swap_ab_pf.so, whose variants prefetch their weights into the L2 before the PDL wait) through ctypes:
    every variant of both by name (a configuration is its index in `names`), a workspace for stream-K, launches on
    torch's current stream."""

    def __init__(self, dev):
        from minisgl_edu.model import qk_kernel
        here = qk_kernel.cubin_path("greedy_argmax").parent
        self.dev, self.ws, self.names, self.entries = dev, None, [], []  # entries[i]: (library, its variant index)
        p, i = ctypes.c_void_p, ctypes.c_int
        for path in (here / "cutlass_swap_ab.so", here / "cutlass_swap_ab_pf.so"):
            if not path.exists():
                continue
            L = ctypes.CDLL(str(path))
            L.swap_ab_name.restype, L.swap_ab_workspace.restype = ctypes.c_char_p, ctypes.c_size_t
            L.swap_ab.argtypes = [i, p, p, p, i, i, i, p, ctypes.c_size_t, p, i]
            for v in range(L.swap_ab_count()):
                self.names.append(L.swap_ab_name(v).decode())
                self.entries.append((L, v))

    def available(self) -> bool:
        return bool(self.entries) and self.dev.type == "cuda" and torch.cuda.get_device_capability(self.dev) == (9, 0)

    def configs(self, n: int, k: int, m: int):
        return [(c,) for c, (L, v) in enumerate(self.entries) if L.swap_ab_can(v, m, n, k) == 0]

    def workspace(self, c, m: int, n: int, k: int) -> int:
        L, v = self.entries[c[0]]
        return L.swap_ab_workspace(v, m, n, k)

    def reserve(self, launches):
        """A workspace for every (cfg, m, n, k) in launches, allocated now: the model's graph capture must not grow it."""
        need = max((self.workspace(c, m, n, k) for c, m, n, k in launches), default=0)
        if self.ws is None or self.ws.numel() < need:
            self.ws = torch.empty(max(need, 1 << 20), dtype=torch.uint8, device=self.dev)

    def mm(self, x, w_, out, c, pdl: bool = True):
        (m, k), n, (L, v) = x.shape, w_.shape[0], self.entries[c[0]]
        self.reserve([(c, m, n, k)])  # grown outside graph capture: the probe's first launch is eager
        rc = L.swap_ab(v, w_.data_ptr(), x.data_ptr(), out.data_ptr(), m, n, k, self.ws.data_ptr(), self.ws.numel(),
                       torch.cuda.current_stream(self.dev).cuda_stream, int(pdl))
        if rc:
            raise RuntimeError(f"cutlass_swap_ab {self.names[c[0]]} at [{m}, {k}] x [{n}, {k}]: error {rc}")


def cutlass_probe(sizes, layers=28, dev=None):
    dev = dev or torch.device("cuda")
    cu = Cutlass(dev)
    if not cu.available():
        print("cutlass: no cutlass_swap_ab.so (CUTLASS=1 bash scripts/build_fi_extra_kernels.sh) or not sm_90", flush=True)
        return []
    return product_probe("cutlass", sizes, cu.configs, cu.mm, lambda c: cu.names[c[0]],
                         lambda c: dict(variant=cu.names[c[0]]), dev=dev, layers=layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemm", action="store_true")
    ap.add_argument("--head", action="store_true", help="--gemm's question for the LM head (2 copies of 311 MB)")
    ap.add_argument("--attn", action="store_true")
    ap.add_argument("--xqa", action="store_true")
    ap.add_argument("--l2", action="store_true")
    ap.add_argument("--skinny", action="store_true")
    ap.add_argument("--pipe", action="store_true")
    ap.add_argument("--cutlass", action="store_true")
    ap.add_argument("--pm", default="16,32,64,96,128,192,256", help="--pipe's and --cutlass's rows")
    ap.add_argument("--sm", default="16,32,48,64,96,128")
    ap.add_argument("--skinny-kinds", default="n,p", help="n: skinny's shapes, p: skinny with x in groups, more accumulators")
    ap.add_argument("--xbs", default="1,8,32,64,128,144,160,192,256")
    ap.add_argument("--m", default="1,8,32,64,96,128,160,192,256")
    ap.add_argument("--bs", default="64,96,128,144,160,176,192,208,224,256")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    out = {}
    if args.gemm:
        out["gemm"] = gemm_probe([int(v) for v in args.m.split(",")])
    if args.head:
        out["head"] = gemm_probe([int(v) for v in args.m.split(",")], layers=2, shapes=HEAD)
    if args.attn:
        out["attn"] = attn_probe([int(v) for v in args.bs.split(",")])
    if args.xqa:
        out["xqa"] = xqa_probe([int(v) for v in args.xbs.split(",")])
    if args.l2:
        out["l2"] = l2_probe([int(v) for v in args.m.split(",")])
    if args.skinny:
        out["skinny"] = skinny_probe([int(v) for v in args.sm.split(",")], kinds=args.skinny_kinds)
    if args.pipe:
        out["pipe"] = pipe_probe([int(v) for v in args.pm.split(",")])
    if args.cutlass:
        out["cutlass"] = cutlass_probe([int(v) for v in args.pm.split(",")])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
