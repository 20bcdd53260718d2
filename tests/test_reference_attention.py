"""Chapter 7 on the CPU: kernel_args() follows the ledger, and the reference backend that reads it is right:
a decode step as one padded batch == one request at a time; an extend over a cached prefix == one prefill."""
from __future__ import annotations

import torch

from minisgl_edu.attention.metadata import kernel_args
from minisgl_edu.attention.reference import ReferenceBackend
from minisgl_edu.paging import KVCache, PagePool
from minisgl_edu.req import Batch, Req, SamplingParams


def test_padded_decode_equals_per_request_attention():
    torch.manual_seed(0)
    q_heads, kv_heads, d, ps = 4, 2, 8, 4
    kv = KVCache(1, 64, ps, kv_heads, d, torch.float32, torch.device("cpu"))
    pool = PagePool(64, ps, 8, 128, torch.device("cpu"))
    backend = ReferenceBackend(kv, pool)
    reqs = [Req(i, [0] * n, SamplingParams(max_tokens=8)) for i, n in enumerate([1, 5, 17, 30])]
    for r in reqs:
        r.table_idx, r.device_len = pool.take_row(), r.prompt_len
    prefill = Batch(reqs, "prefill")
    prefill.out_loc = pool.assign_locations(reqs)
    backend.prepare(prefill)
    n = sum(r.extend_len for r in reqs)
    backend.forward(torch.randn(n, q_heads, d), torch.randn(n, kv_heads, d), torch.randn(n, kv_heads, d), 0, prefill)
    for _ in range(3):
        for r in reqs:
            r.complete_one()
        q, k, v = (torch.randn(len(reqs), h, d) for h in (q_heads, kv_heads, kv_heads))
        decode = Batch(reqs, "decode")
        decode.out_loc = pool.assign_locations(reqs)
        backend.prepare(decode)
        assert decode.attn_metadata.padded_locs is not None  # the batched path
        got = backend.forward(q, k, v, 0, decode)
        one_by_one = Batch(reqs, "prefill")  # same ledger, per-request path (q_len 1 over a cached prefix)
        one_by_one.out_loc = decode.out_loc
        backend.prepare(one_by_one)
        assert one_by_one.attn_metadata.padded_locs is None
        want = backend.forward(q, k, v, 0, one_by_one)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        # and against attention written out by hand for the longest request
        r = reqs[-1]
        locs = pool.page_table[r.table_idx, : r.device_len]
        kk, vv = kv.k[0][locs].repeat_interleave(2, 1), kv.v[0][locs].repeat_interleave(2, 1)
        w = torch.softmax(torch.einsum("hd,thd->ht", q[-1], kk) / d ** 0.5, dim=-1)
        torch.testing.assert_close(got[-1], torch.einsum("ht,thd->hd", w, vv), rtol=1e-5, atol=1e-6)


def test_kernel_args_follow_the_ledger():
    """Chapter 7's table: A fresh (0 -> 5), B extends a 4-token prefix (4 -> 9), C fresh (0 -> 2)."""
    pool = PagePool(64, 2, 4, 32, torch.device("cpu"))
    a, b, c = (Req(i, [0] * n, SamplingParams(max_tokens=4)) for i, n in enumerate((5, 9, 2)))
    for r in (a, b, c):
        r.table_idx = pool.take_row()
    b.device_len = 4
    first = pool.assign_locations([b])
    b.cached_len, b.device_len, a.device_len, c.device_len = 4, 9, 5, 2
    out_loc = pool.assign_locations([a, b, c])
    args = kernel_args([a, b, c], pool)
    assert args.cu_seqlens_q.tolist() == [0, 5, 10, 12] and args.cu_seqlens_k.tolist() == [0, 5, 14, 16]
    assert args.seq_lens_k.tolist() == [5, 9, 2] and args.num_padding == 0
    want = torch.cat([pool.page_table[r.table_idx, : r.device_len] for r in (a, b, c)])
    assert torch.equal(args.kv_indices, want) and args.kv_indices.dtype == torch.int32
    assert args.kv_indices[5:9].tolist() == first.tolist() and args.kv_indices[9:14].tolist() == out_loc[5:10].tolist()
    for t in (args.cu_seqlens_q, args.cu_seqlens_k, args.seq_lens_k, args.last_page_len):
        assert t.dtype == torch.int32
    padded = kernel_args([a, b, c], pool, padded_size=8)  # five padding lanes: one key each, in the dummy page
    assert padded.num_padding == 5 and padded.cu_seqlens_k.tolist()[-6:] == [16, 17, 18, 19, 20, 21]
    assert set((padded.kv_indices[16:] // 2).tolist()) == {pool.num_pages}


def expands_to_slots(pg, args, ps: int) -> bool:
    """Do the pages, expanded back (page * ps + offset, below each lane's tokens), give kernel_args' slots exactly?"""
    cu_k, cu_p = args.cu_seqlens_k.tolist(), pg.indptr.tolist()
    for i, n in enumerate(args.seq_lens_k.tolist()):
        pages = pg.indices[cu_p[i]:cu_p[i + 1]]
        slots = (pages[:, None] * ps + torch.arange(ps)).flatten()[:n]
        if not torch.equal(slots.to(torch.int32), args.kv_indices[cu_k[i]:cu_k[i + 1]]):
            return False
    return True


def pages_without_the_offset(args, ps: int):
    """A wrong page_args kept for the test to catch: page j of lane i read at slot entry cu_k[i] + j, not + j * ps."""
    import numpy as np

    from minisgl_edu.attention.metadata import Pages
    seq, cu_k = args.seq_lens_k.numpy().astype(np.int64), args.cu_seqlens_k.numpy().astype(np.int64)
    n = (seq + ps - 1) // ps
    cu_p = np.concatenate([[0], np.cumsum(n)])
    first = np.repeat(cu_k[:-1] - cu_p[:-1], n) + np.arange(cu_p[-1])
    return Pages(torch.tensor(cu_p, dtype=torch.int32), args.kv_indices[torch.from_numpy(first)] // ps,
                 torch.tensor(seq - (n - 1) * ps, dtype=torch.int32))


def test_page_args_read_the_same_slots_in_pages():
    """FlashInfer with pages of page_size tokens (attention/flashinfer.py): each lane's page ids, end to end, and the
    length of its last page. Expanded back they give kernel_args' slots exactly, padding lanes and a prefill graph's
    slack lane (all in the dummy page) too; a page_args that forgets the page offset is caught."""
    from minisgl_edu.attention.metadata import page_args
    ps = 4
    pool = PagePool(64, ps, 8, 64, torch.device("cpu"))
    reqs = [Req(i, [0] * n, SamplingParams(max_tokens=4)) for i, n in enumerate((1, 4, 5, 13, 16))]
    for r in reqs:
        r.table_idx, r.device_len = pool.take_row(), r.prompt_len
    pool.assign_locations(reqs)
    for args in (kernel_args(reqs, pool), kernel_args(reqs, pool, padded_size=8),
                 kernel_args(reqs[:2], pool, padded_size=4, padded_tokens=40)):
        pg = page_args(args, ps)
        lens = args.seq_lens_k.tolist()
        assert pg.indptr.tolist() == [0] + torch.tensor([-(-n // ps) for n in lens]).cumsum(0).tolist()
        assert pg.last_page_len.tolist() == [n - (-(-n // ps) - 1) * ps for n in lens]
        assert all(1 <= x <= ps for x in pg.last_page_len.tolist())
        for t in (pg.indptr, pg.indices, pg.last_page_len):
            assert t.dtype == torch.int32
        assert expands_to_slots(pg, args, ps)
        if max(lens[:len(lens) - args.num_padding]) > ps:  # a request of several pages (padding lanes stay in one)
            assert not expands_to_slots(pages_without_the_offset(args, ps), args, ps)
        if args.num_padding:
            cu_p = pg.indptr.tolist()
            assert set(pg.indices[cu_p[len(lens) - args.num_padding]:].tolist()) == {pool.num_pages}
    one = kernel_args(reqs, pool)
    same = page_args(one, 1)  # pages of one token: kernel_args' own arrays, not copies
    assert same.indices is one.kv_indices and same.indptr is one.cu_seqlens_k and same.last_page_len is one.last_page_len


def test_prefill_graph_lanes_and_the_slack_lane():
    """A prefill graph's arguments (graphs.py): the prompts in the first lanes, padding lanes of one token, and the
    last padding lane taking the slack, so the query rows add up to the graph's capacity; every key a padding lane
    reads is in the dummy page. And which graph a step fits (prefill_key needs no GPU: it reads only the keys)."""
    from types import SimpleNamespace

    from minisgl_edu.graphs import PREFILL_LANES, GraphRunner, extend_capacities
    pool = PagePool(64, 1, 8, 64, torch.device("cpu"))
    a, b = (Req(i, [0] * n, SamplingParams(max_tokens=4)) for i, n in enumerate((5, 3)))
    for r in (a, b):
        r.table_idx, r.device_len = pool.take_row(), r.prompt_len
    pool.assign_locations([a, b])
    args = kernel_args([a, b], pool, padded_size=PREFILL_LANES, padded_tokens=20)
    assert args.cu_seqlens_q.tolist() == [0, 5, 8, 9, 20]  # a padding lane of 1, then the slack lane of 11
    assert args.seq_lens_k.tolist() == [5, 3, 1, 11] and args.num_padding == 2
    assert set(args.kv_indices[8:].tolist()) == {pool.num_pages}  # page size 1: the dummy page is one slot
    assert kernel_args([a, b], pool, padded_size=2, padded_tokens=20).cu_seqlens_q.tolist() == [0, 5, 8]  # no lane
    runner = SimpleNamespace(prefill_keys=[(d, c) for d in (0, 1, 2, 4) for c in extend_capacities(512)])
    key = lambda reqs, d: GraphRunner.prefill_key(runner, Batch(reqs, "prefill", decode_rows=d))
    decoding = [SimpleNamespace(extend_len=1) for _ in range(3)]
    prompt = lambda n: SimpleNamespace(extend_len=n)
    assert key([prompt(100)], 0) == (0, 256)
    assert key([prompt(253)], 0) == (0, 256) and key([prompt(254)], 0) == (0, 512)  # 253 + 3 lanes' tokens = 256
    assert key(decoding + [prompt(300)], 3) == (4, 512)  # three decode rows padded to 4
    assert key([prompt(10)] * 4, 0) is None  # more prompts than lanes: eager
    assert key([prompt(600)], 0) is None  # more rows than any graph holds: eager
    # a wrong fit that forgets the padding and slack lanes' tokens: it picks a graph the step overflows, and is caught
    from minisgl_edu.exercises.swap import patched
    forgets = patched("minisgl_edu.graphs:GraphRunner.prefill_key",
                      ("t >= rows + PREFILL_LANES - prompts", "t >= rows"))
    assert forgets(runner, Batch([prompt(254)], "prefill")) == (0, 256) != key([prompt(254)], 0)


def test_one_kernel_mixed_lanes_follow_the_graph_rows():
    """A mixed graph planned as one prefill kernel (FlashInfer, 64-wide heads): lane i's query rows must be the
    rows replay_prefill puts its request in (decode rows [0, d), their padding [d, dp), the prompts from dp, the
    slack last), and every padding lane reads only the dummy page. The wrong order kept here (padding lanes after
    the prompts, kernel_args' own order) puts the prompt's queries one row early, and is caught."""
    from minisgl_edu.attention.metadata import mixed_lanes
    from minisgl_edu.exercises.swap import patched
    from minisgl_edu.graphs import PREFILL_LANES
    pool = PagePool(128, 1, 8, 64, torch.device("cpu"))
    reqs = [Req(i, [0] * n, SamplingParams(max_tokens=4)) for i, n in enumerate((6, 9, 4, 20))]
    for r in reqs:
        r.table_idx, r.device_len = pool.take_row(), r.prompt_len
    pool.assign_locations(reqs)
    for r in reqs[:3]:
        r.cached_len = r.device_len - 1  # three decode rows, then a prompt of 20
    d, dp, t = 3, 4, 32  # the (4, 32) graph: decode rows padded to 4, 32 prompt rows

    def lanes_of(fn):
        args = kernel_args(fn(reqs, d, dp, pool.dummy_row), pool, dp + PREFILL_LANES, dp + t)
        return args, args.cu_seqlens_q.tolist()
    args, cu_q = lanes_of(mixed_lanes)
    assert cu_q == [0, 1, 2, 3, 4, 24, 25, 26, dp + t]  # decode rows, one padding lane, the prompt at dp, slack
    assert len(cu_q) - 1 == dp + PREFILL_LANES  # the lanes the graph's wrapper was built with
    cu_k = args.cu_seqlens_k.tolist()
    pad = [args.kv_indices[cu_k[i]:cu_k[i + 1]] for i in (3, 5, 6, 7)]
    assert all(set(p.tolist()) == {pool.num_pages} for p in pad)  # padding and slack: the dummy slot only
    at_the_end = patched("minisgl_edu.attention.metadata:mixed_lanes",
                         ("reqs[:decode_rows] + [PadLane(dummy_row)] * (padded_size - decode_rows) + reqs[decode_rows:]",
                          "reqs + [PadLane(dummy_row)] * (padded_size - decode_rows)"))
    _, wrong = lanes_of(at_the_end)
    assert wrong[3] != dp and cu_q[4] == dp  # the prompt's first query row: 3 instead of the graph's row 4


def test_split_args_equal_a_kernel_args_per_part():
    """A split mixed step plans its decode kernel and its prefill kernel from one kernel_args over every lane
    (`split_args`: views, the prompt part's prefix sums rebased to 0). Each part must equal kernel_args of that
    part alone, as the backend called it before: in a graph (decode rows padded, prompt lanes and slack) and
    eager. The wrong split kept here (the prompt part's prefix sums left where the decode rows end) is caught."""
    from minisgl_edu.attention.metadata import mixed_lanes, split_args
    from minisgl_edu.exercises.swap import patched
    from minisgl_edu.graphs import PREFILL_LANES
    pool = PagePool(256, 1, 8, 64, torch.device("cpu"))
    reqs = [Req(i, [0] * n, SamplingParams(max_tokens=4)) for i, n in enumerate((6, 9, 4, 20, 7))]
    for r in reqs:
        r.table_idx, r.device_len = pool.take_row(), r.prompt_len
    pool.assign_locations(reqs)
    for r in reqs[:3]:
        r.cached_len = r.device_len - 1  # three decode rows, then prompts of 20 and 7
    fields = ("cu_seqlens_q", "cu_seqlens_k", "seq_lens_k", "kv_indices", "last_page_len")
    same = lambda x, y: all(torch.equal(getattr(x, f), getattr(y, f)) for f in fields) and x.num_padding == y.num_padding

    def check(split_fn, dp, t):  # dp decode lanes (padded), t prompt rows (0: eager)
        d, graph = 3, t > 0
        args = kernel_args(mixed_lanes(reqs, d, dp, pool.dummy_row), pool, dp + PREFILL_LANES if graph else 0,
                           dp + t if graph else 0)
        decode, prompts = split_fn(args, dp, d)
        return (same(decode, kernel_args(reqs[:d], pool, dp if graph else 0)) and
                same(prompts, kernel_args(reqs[d:], pool, PREFILL_LANES if graph else 0, t)))
    assert check(split_args, 4, 32) and check(split_args, 3, 0)  # the (4, 32) graph; an eager mixed step
    not_rebased = patched("minisgl_edu.attention.metadata:split_args", ("cu_k[split:] - k0", "cu_k[split:]"))
    assert not check(not_rebased, 4, 32) and not check(not_rebased, 3, 0)


def test_without_last_lane_is_kernel_args_with_one_padding_lane_fewer():
    """TC_WHOLE with SPARE_LANE: a graph size whose balanced graph has a spare lane builds its decode args with one
    more padding lane; the CUDA-core graph of that size plans them less that lane (`without_last_lane`, views), which
    must be kernel_args of the graph's own size. The wrong cut kept here (the last lane's key left in) is caught."""
    from minisgl_edu.attention.metadata import without_last_lane
    from minisgl_edu.exercises.swap import patched
    pool = PagePool(256, 1, 8, 64, torch.device("cpu"))
    reqs = [Req(i, [0] * n, SamplingParams(max_tokens=4)) for i, n in enumerate((6, 9, 4))]
    for r in reqs:
        r.table_idx, r.device_len = pool.take_row(), r.prompt_len
    pool.assign_locations(reqs)
    fields = ("cu_seqlens_q", "cu_seqlens_k", "seq_lens_k", "kv_indices", "last_page_len")
    same = lambda x, y: all(torch.equal(getattr(x, f), getattr(y, f)) for f in fields) and x.num_padding == y.num_padding
    for padded in (3, 4, 8):  # no padding lane left, one, five
        args = kernel_args(reqs, pool, padded + 1)
        assert len(args.seq_lens_k) == padded + 1 and args.seq_lens_k[-1] == 1  # the spare lane: one key
        assert same(without_last_lane(args), kernel_args(reqs, pool, padded))
    keeps_its_key = patched("minisgl_edu.attention.metadata:without_last_lane",
                            ("args.kv_indices[:int(args.cu_seqlens_k[b])]", "args.kv_indices"))
    assert not same(keeps_its_key(kernel_args(reqs, pool, 5)), kernel_args(reqs, pool, 4))


def test_extend_over_a_cached_prefix_equals_one_prefill():
    """The causal offset read from KernelArgs: a prompt computed in two steps (prefix, then the rest)
    gives the rest the same attention output as one prefill of the whole prompt."""
    torch.manual_seed(1)
    q_heads, kv_heads, d, n, cut = 4, 2, 8, 11, 6
    q, k, v = torch.randn(n, q_heads, d), torch.randn(n, kv_heads, d), torch.randn(n, kv_heads, d)
    outs = []
    for steps in ([(0, n)], [(0, cut), (cut, n)]):
        kv = KVCache(1, 16, 4, kv_heads, d, torch.float32, torch.device("cpu"))
        pool = PagePool(16, 4, 2, 32, torch.device("cpu"))
        backend, r = ReferenceBackend(kv, pool), Req(0, [0] * n, SamplingParams(max_tokens=4))
        r.table_idx = pool.take_row()
        for s, e in steps:
            r.cached_len, r.device_len = s, e
            batch = Batch([r], "prefill")
            batch.out_loc = pool.assign_locations([r])
            backend.prepare(batch)
            o = backend.forward(q[s:e], k[s:e], v[s:e], 0, batch)
        outs.append(o)
    torch.testing.assert_close(outs[1], outs[0][cut:], rtol=1e-5, atol=1e-6)
    # the bug it rules out: queries aligned to the start of the keys (offset 0, query j sees keys 0..j)
    start_aligned = torch.arange(n)[None, :] <= torch.arange(n - cut)[:, None]
    wrong = torch.nn.functional.scaled_dot_product_attention(
        q[cut:].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=start_aligned, enable_gqa=True)
    assert not torch.allclose(wrong.transpose(0, 1), outs[1], atol=1e-3)
