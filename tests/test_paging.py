"""Chapter 4 — Pages and the page table: page-aligned allocation, raw token locations, no leak."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minisgl_edu.paging import KVCache, PagePool, cdiv, extend_spans
from minisgl_edu.req import Req, SamplingParams


def make_req(pool: PagePool, prompt_len: int, uid: int = 0) -> Req:
    req = Req(uid, [1] * prompt_len, SamplingParams(max_tokens=1000))
    req.table_idx = pool.take_row()
    return req


def check_rows(pool: PagePool, reqs: list[Req], other_pages: int = 0) -> None:
    """Every request's first device_len entries are valid slots in its own pages; no slot is shared;
    free pages + pages in use (+ `other_pages` taken outside any request) == all pages."""
    ps, free = pool.page_size, set(pool.free_pages.tolist())
    assert len(free) == pool.num_free_pages, "a page sits twice in the free list"
    seen_locs, used_pages = set(), set()
    for r in reqs:
        locs = pool.page_table[r.table_idx, : r.device_len].long()
        pos = torch.arange(r.device_len)
        assert bool(((locs % ps) == (pos % ps)).all()), "slot offset within its page != position offset"
        assert bool((locs < pool.num_pages * ps).all()) and bool((locs >= 0).all())
        pages = locs // ps
        # a request's consecutive positions inside one logical page share one physical page
        assert bool((pages.view(-1)[:: ps].repeat_interleave(ps)[: r.device_len] == pages).all())
        assert not (set(pages.tolist()) & free), "a page in use is also free"
        assert not (set(locs.tolist()) & seen_locs), "a slot handed out twice"
        seen_locs |= set(locs.tolist())
        used_pages |= set(pages.tolist())
    assert len(used_pages) + len(free) + other_pages == pool.num_pages, "page leak"


def test_extend_spans_flattens_the_new_positions():
    """Per request (cached_len, extend_len); per new token its page-table row and position: the
    concatenated aranges of [cached_len, device_len), a request extending nothing included."""
    reqs = []
    for uid, (row, cached, device) in enumerate([(5, 3, 5), (0, 4, 4), (2, 10, 13)]):
        r = Req(uid, [1] * 20, SamplingParams(max_tokens=1))
        r.table_idx, r.cached_len, r.device_len = row, cached, device
        reqs.append(r)
    cached, ext, rows, pos = extend_spans(reqs)
    assert cached.tolist() == [3, 4, 10] and ext.tolist() == [2, 0, 3]
    assert rows.tolist() == [5, 5, 2, 2, 2] and pos.tolist() == [3, 4, 10, 11, 12]
    assert [a.tolist() for a in extend_spans([])] == [[], [], [], []]
    assert cdiv(np.array([0, 1, 4, 5]), 4).tolist() == [0, 1, 1, 2] and cdiv(9, 4) == 3


def test_check_integrity_catches_leaks_and_double_counts():
    """pages_of + check_integrity account for every page and row once; each broken ledger below is caught."""
    pool = PagePool(num_pages=16, page_size=4, max_running_reqs=3, max_seq_len=64, device=torch.device("cpu"))
    a, b = make_req(pool, 9, 0), make_req(pool, 4, 1)
    a.device_len, b.device_len = 9, 4
    pool.assign_locations([a, b])
    pool.check_integrity([a, b], in_step=True)
    for r in (a, b):
        r.complete_one()  # between steps the ledger says cached_len: 9 -> 3 pages (a partial one), 4 -> 1 page
    assert [len(pool.pages_of(r)) for r in (a, b)] == [3, 1]
    pool.check_integrity([a, b])
    with pytest.raises(AssertionError, match="page leak"):  # b is forgotten: its page belongs to nobody
        pool.check_integrity([a])
    with pytest.raises(AssertionError, match="page leak"):  # at device_len b would hold a page it has not got yet
        pool.check_integrity([a, b], in_step=True)
    floor = lambda r, start=None, in_step=False: pool.page_table[r.table_idx, : r.cached_len // 4 * 4: 4] // 4
    with pytest.MonkeyPatch.context() as m:  # a pages_of that drops the partial last page
        m.setattr(pool, "pages_of", floor)
        with pytest.raises(AssertionError, match="page leak"):
            pool.check_integrity([a, b])
    before = pool.free_pages
    pool.free(pool.page_table[b.table_idx, :4])  # b's page handed back while b holds it ...
    pool.free_pages = pool.free_pages[1:]  # ... and a free page lost: the count alone would pass
    with pytest.raises(AssertionError, match="counted twice"):
        pool.check_integrity([a, b])
    pool.free_pages = before
    pool.check_integrity([a, b])
    row = pool.take_row()  # a row nobody holds
    with pytest.raises(AssertionError, match="row leak"):
        pool.check_integrity([a, b])
    pool.check_integrity([a, b], busy_rows=1)  # ... unless the caller says it waits (deferred_rows)
    pool.release_row(row)
    pool.check_integrity([a, b], other_locs=pool.page_table[a.table_idx, :0])


def test_dummy_page_row_and_kv():
    pool = PagePool(num_pages=4, page_size=4, max_running_reqs=2, max_seq_len=10, device=torch.device("cpu"))
    assert pool.dummy_row == 2 and pool.free_rows == [0, 1]
    dummy = pool.page_table[pool.dummy_row]
    assert bool(((dummy // 4) == 4).all())  # every padding lane writes only to the dummy page
    assert (dummy % 4).tolist() == [i % 4 for i in range(10)]
    kv = KVCache(2, num_pages=4, page_size=4, kv_heads=1, head_dim=2, dtype=torch.float32, device="cpu")
    assert kv.k.shape == (2, 20, 1, 2) and kv.dummy_page == 4
    assert bool((kv.k[:, 16:] == 0).all()) and bool((kv.v[:, 16:] == 0).all())


def _check_stores(kv: KVCache) -> None:
    """store and store_kv write exactly the given slots of the given layer, K into k and V into v, and nothing else;
    each layer's K and V stay one contiguous block (what the kernels ask); the dummy page starts zeroed."""
    layers = kv.k.shape[0]
    assert all(kv.k[i].is_contiguous() and kv.v[i].is_contiguous() for i in range(layers))
    assert bool((kv.k[:, -4:] == 0).all()) and bool((kv.v[:, -4:] == 0).all())
    kv.kv.zero_()
    loc = torch.tensor([3, 0, 9])
    k, v = torch.randn(3, 1, 2), torch.randn(3, 1, 2)
    kv.store(0, loc, k, v)
    kv.store_kv(1, loc, torch.stack([v, k]))  # K and V swapped in layer 1, to tell them apart
    want_k, want_v = torch.zeros_like(kv.k), torch.zeros_like(kv.v)
    want_k[0, loc], want_v[0, loc] = k, v
    want_k[1, loc], want_v[1, loc] = v, k
    assert torch.equal(kv.k, want_k) and torch.equal(kv.v, want_v)


@pytest.mark.parametrize("layer_major", [False, True])
def test_kv_layouts_store_the_same(monkeypatch, layer_major):
    """Both pool layouts (paging.KV_LAYER_MAJOR) hold the same per-layer K and V; a store_kv that indexes the
    default layout's way in a layer-major pool (kept: the wrong implementation) writes elsewhere and is caught."""
    import minisgl_edu.paging as paging
    monkeypatch.setattr(paging, "KV_LAYER_MAJOR", layer_major)
    # two layers: then the wrong indexing below fits the shapes and writes silently, rather than raising
    kv = KVCache(2, num_pages=4, page_size=4, kv_heads=1, head_dim=2, dtype=torch.float32, device="cpu")
    assert kv.kv.shape[:2] == (2, 2) and kv.layer_major == layer_major
    _check_stores(kv)
    if layer_major:
        class DefaultIndexing(KVCache):
            def store_kv(self, layer, out_loc, kv):
                self.kv[:, layer].index_copy_(1, out_loc, kv)
        with pytest.raises(AssertionError):
            _check_stores(DefaultIndexing(2, num_pages=4, page_size=4, kv_heads=1, head_dim=2, dtype=torch.float32,
                                          device="cpu"))


@pytest.mark.parametrize("ps", [1, 4, 16])
def test_prefill_and_decode_locations(ps):
    pool = PagePool(num_pages=64, page_size=ps, max_running_reqs=4, max_seq_len=256, device=torch.device("cpu"))
    a, b = make_req(pool, 13, 0), make_req(pool, 5, 1)
    a.device_len, b.device_len = 13, 5
    out = pool.assign_locations([a, b])
    assert len(out) == 18
    assert pool.num_free_pages == 64 - cdiv(13, ps) - cdiv(5, ps)  # allocation is page-aligned
    check_rows(pool, [a, b])
    for _ in range(2 * ps + 3):  # decode: fill the partial page, then open new ones
        for r in (a, b):
            r.complete_one()
        out = pool.assign_locations([a, b])
        assert len(out) == 2
        check_rows(pool, [a, b])
    assert pool.num_free_pages == 64 - cdiv(a.device_len, ps) - cdiv(b.device_len, ps)
    for r in (a, b):
        r.cached_len = r.device_len
        pool.free_tail(r, 0)
        pool.release_row(r.table_idx)
    assert pool.num_free_pages == 64 and sorted(pool.free_rows) == [0, 1, 2, 3]
    assert sorted(pool.free_pages.tolist()) == list(range(64))
    pool.check_integrity([])


def test_out_of_pages_raises_and_changes_nothing():
    pool = PagePool(num_pages=3, page_size=2, max_running_reqs=2, max_seq_len=32, device=torch.device("cpu"))
    r = make_req(pool, 7)
    r.device_len = 7  # needs 4 pages
    table = pool.page_table.clone()
    with pytest.raises(RuntimeError, match="out of KV pages"):
        pool.assign_locations([r])
    assert pool.num_free_pages == 3 and torch.equal(table, pool.page_table)


def test_evict_fn_is_called_when_short():
    pool = PagePool(num_pages=4, page_size=2, max_running_reqs=2, max_seq_len=32, device=torch.device("cpu"))
    held = pool.take_pages(4)
    asked = []
    slots = (held[:2, None] * 2 + torch.arange(2)).flatten()  # every slot of two pages
    pool.evict_fn = lambda n: (asked.append(n), slots)[1]  # the "cache" gives back two pages
    pages = pool.take_pages(2)
    assert asked == [4] and sorted(pages.tolist()) == sorted(held[:2].tolist())


# ---- property test: random take / free / assign sequences ----------------------------------------
ops = st.lists(st.tuples(st.sampled_from(["new", "extend", "finish", "take", "give"]),
                         st.integers(0, 7), st.integers(1, 20)), min_size=1, max_size=25)


@settings(max_examples=500, deadline=None)
@given(ps=st.sampled_from([1, 2, 4]), num_pages=st.integers(1, 24), ops=ops)
def test_allocator_never_double_allocates_or_leaks(ps, num_pages, ops):
    pool = PagePool(num_pages, ps, max_running_reqs=4, max_seq_len=200, device=torch.device("cpu"))
    reqs: list[Req] = []
    raw: list[torch.Tensor] = []  # pages taken directly with take_pages
    for op, pick, n in ops:
        before = (pool.num_free_pages, pool.page_table.clone())
        try:
            if op == "new" and pool.free_rows:
                r = make_req(pool, n, uid=len(reqs))
                r.device_len = n
                try:
                    pool.assign_locations([r])
                except RuntimeError:
                    pool.release_row(r.table_idx)
                    raise
                reqs.append(r)
            elif op == "extend" and reqs:
                batch = reqs[pick % len(reqs):][:2]  # one or two requests extend together
                for r in batch:
                    r.cached_len, r.device_len = r.device_len, r.device_len + (1 if len(batch) > 1 else n)
                try:
                    pool.assign_locations(batch)
                except RuntimeError:
                    for r in batch:  # roll the ledger back: nothing was allocated
                        r.device_len, r.cached_len = r.cached_len, r.cached_len - (r.device_len - r.cached_len)
                    raise
            elif op == "finish" and reqs:
                r = reqs.pop(pick % len(reqs))
                r.cached_len = r.device_len
                pool.free_tail(r, 0)
                pool.release_row(r.table_idx)
            elif op == "take":
                raw.append(pool.take_pages(n % 4 + 1))
            elif op == "give" and raw:
                pool.free((raw.pop(pick % len(raw))[:, None] * ps + torch.arange(ps)).flatten())  # whole pages
        except RuntimeError:  # out of pages: the pool must be exactly as before
            assert pool.num_free_pages == before[0] and torch.equal(pool.page_table, before[1])
        held_raw = [p for t in raw for p in t.tolist()]
        assert len(set(held_raw)) == len(held_raw)
        assert not set(held_raw) & set(pool.free_pages.tolist())
        in_use = {int(p) for r in reqs for p in (pool.page_table[r.table_idx, : r.device_len] // ps).tolist()}
        assert not in_use & set(held_raw)
        check_rows(pool, reqs, other_pages=len(held_raw))
        raw_locs = torch.cat([(t[:, None] * ps + torch.arange(ps)).flatten() for t in raw]
                             + [torch.zeros(0, dtype=torch.int64)])
        pool.check_integrity(reqs, other_locs=raw_locs, in_step=True)  # assigned through device_len
        assert len(pool.free_rows) + len(reqs) == 4
