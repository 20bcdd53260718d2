"""Issue 16, session 43: the tensor-core decode kernel planned unsplit in a CUDA graph, again.

    python benchmarks/issue16/s43/tc_whole.py [--bs 128,192,256] [--layers 28]

Session 18 planned the balanced (tensor-core) decode graphs with `disable_split_kv` and the first timed step never
finished, twice, on the H200; the experiment was removed (`cbd2195`). Session 41 found why such a plan can go wrong:
in graph mode FlashInfer's prefill planner (which the tensor-core decode kernel uses) sizes the grid for the most
query tiles the rows could make, writes the (request, tile) of the real ones only, and the spare blocks read what the
page-locked schedule buffer held before; a recycled buffer holds request indices far outside the batch.
`clean_schedule` now zeroes that buffer, so the spare blocks compute request 0 again. Unsplit, a decode plan of
`bs` one-row requests has ceil(2 bs / 16) + bs - 1 blocks a KV head and bs real ones: 31 spares at 256, each a whole
request's keys.

The kernel alone over `layers` layers' K/V in one CUDA graph, µs a layer, contexts even (1,024) or uneven
(256-1,792), the same K/V and page table seen as pages of 1 and of 16 tokens:
  A  CUDA-core kernel, graph-mode plan (the engine's default at page size 1)
  B  tensor-core kernel, graph-mode plan (the engine's balanced graphs): in graph mode the planner always calls it
     split, so partial outputs and a merge kernel even where each request is one chunk, and a valid-block mask
     that stops the spare blocks
  C  tensor-core kernel, unsplit (`disable_split_kv`), schedule zeroed first: spares recompute request 0
  D  as C with one more lane, a one-key dummy request, and the spare blocks pointed at it (the cheapest spares)
Each output is compared with A's at page size 1 (relative error), and the spare blocks are counted
(attention/flashinfer.py's prefill_grid). C and D run last: if session 41's reading is wrong, they hang (the call's
timeout ends them).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from lt_probe import HEAD_DIM, KV_HEADS, Q_HEADS, graph_time  # noqa: E402
from minisgl_edu.attention.flashinfer import clean_schedule, prefill_grid  # noqa: E402

PAGE = 16


def main() -> None:
    import flashinfer
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", default="128,192,256")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--ctx", type=int, default=1024)
    args = ap.parse_args()
    sizes, layers, ctx = [int(v) for v in args.bs.split(",")], args.layers, args.ctx
    dev = torch.device("cuda")
    print(torch.__version__, flashinfer.__version__, torch.cuda.get_device_name(), flush=True)
    pages_max = max(sizes) * (-(-(ctx * 7 // 4) // PAGE)) + 1  # the last page: the dummy request's one key
    kv = [(torch.randn(pages_max, PAGE, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16),
           torch.randn(pages_max, PAGE, KV_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)) for _ in range(layers)]
    views = {PAGE: kv, 1: [(k.view(-1, 1, KV_HEADS, HEAD_DIM), v.view(-1, 1, KV_HEADS, HEAD_DIM)) for k, v in kv]}
    kw = dict(num_qo_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, q_data_type=torch.bfloat16,
              kv_data_type=torch.bfloat16)

    def wrapper(n: int, tc: bool, cap: int):
        i32 = dict(dtype=torch.int32, device=dev)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.zeros(128 << 20, dtype=torch.uint8, device=dev), "NHD", use_cuda_graph=True, use_tensor_cores=tc,
            paged_kv_indptr_buffer=torch.zeros(n + 1, **i32), paged_kv_indices_buffer=torch.zeros(cap, **i32),
            paged_kv_last_page_len_buffer=torch.ones(n, **i32), backend="fa2")
        return clean_schedule(w)

    for bs in sizes:
        gen = torch.Generator().manual_seed(bs)
        for spread in ("even", "uneven"):
            lens = torch.full((bs,), ctx) if spread == "even" else torch.randint(ctx // 4, ctx * 7 // 4 + 1, (bs,),
                                                                                 generator=gen)
            npages = -(-lens // PAGE)
            pids = torch.randperm(pages_max - 1, generator=gen)[:int(npages.sum())].to(torch.int32)
            # the same keys both ways: slot = page * 16 + offset, request by request
            slots = torch.cat([(pids[int(a):int(b)].long()[:, None] * PAGE + torch.arange(PAGE)).flatten()[:int(n)]
                               for a, b, n in zip(torch.cumsum(npages, 0) - npages, torch.cumsum(npages, 0), lens)])
            tables = {PAGE: (torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(npages, 0)]).to(torch.int32),
                             pids, (lens - (npages - 1) * PAGE).to(torch.int32)),
                      1: (torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)]).to(torch.int32),
                          slots.to(torch.int32), torch.ones(bs, dtype=torch.int32))}
            q = torch.randn(bs + 1, Q_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            gb = int(lens.sum()) * KV_HEADS * HEAD_DIM * 4 / 1e9
            ref = None
            line = []
            for name, tc, whole, dummy in (("A", False, False, False), ("B", True, False, False),
                                           ("D", True, True, True), ("C", True, True, False)):
                for page in (1, PAGE):
                    indptr, ids, last = tables[page]
                    n = bs + dummy
                    if dummy:  # one more request: the last page's first key
                        dummy_id = (pages_max - 1) * (PAGE // page)
                        indptr = torch.cat([indptr, indptr[-1:] + 1])
                        ids = torch.cat([ids, torch.tensor([dummy_id], dtype=torch.int32)])
                        last = torch.cat([last, torch.ones(1, dtype=torch.int32)])
                    w = wrapper(n, tc, int(ids.numel()))
                    extra = {"disable_split_kv": True} if whole else {}
                    w.plan(indptr, ids, last, page_size=page, **kw, **extra)
                    spares = ""
                    if tc:
                        grid = prefill_grid(w._plan_info)
                        real = grid.real_blocks([1] * n, Q_HEADS // KV_HEADS)
                        spares = f" {grid.blocks - real} spare"
                        if dummy:  # the spare blocks to the dummy request (a one-key request)
                            grid.requests(w._int_workspace_buffer)[real:].fill_(bs)
                    out = torch.empty(n, Q_HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
                    t = graph_time(lambda i: w.run(q[:n], views[page][i], out=out), layers)
                    torch.cuda.synchronize()
                    o = out[:bs].float()
                    if ref is None:
                        ref, err = o.clone(), 0.0
                    else:
                        err = float((o - ref).norm() / ref.norm())
                    line.append(f"{name}{page:<2} {t:6.1f} µs ({gb / t * 1e3:4.2f} TB/s, err {err:.0e}{spares})")
                    print(f"attn bs={bs:>4} {spread:>6} " + line[-1], flush=True)
                    del w
    print("done", flush=True)


if __name__ == "__main__":
    main()
