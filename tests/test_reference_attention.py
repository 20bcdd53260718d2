"""The reference backend's two paths agree: a decode step as one padded batch == one request at a time."""
from __future__ import annotations

import torch

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
