"""Chapter 4: assign_locations and free_tail — page-table invariants on random batches, then the engine."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import Wrong
from ..oracle import STANDARD_CASES, Case, compare
from ..swap import swapped
from . import call, prop

PAGE_CASES = STANDARD_CASES + (Case(4, 64, 128, 8),)  # the last: a tight pool, so taking pages evicts


def _pool(ps: int, num_pages: int = 64, rows: int = 4):
    from ...paging import PagePool
    return PagePool(num_pages, ps, rows, 96, "cpu")


# a batch history: requests, each with a prefix assigned by the library and then steps (extend lengths)
histories = st.tuples(st.sampled_from([1, 2, 4, 8]),
                      st.lists(st.tuples(st.integers(0, 13), st.lists(st.integers(1, 9), min_size=1, max_size=4)),
                               min_size=1, max_size=3))


def grade_assign_locations(ex, path, module) -> None:
    from ...paging import PagePool
    from ...req import Req, SamplingParams
    library = PagePool.__dict__["assign_locations"]

    def check(h):
        ps, spec = h
        pool = _pool(ps)
        reqs = []
        for i, (first, steps) in enumerate(spec):
            r = Req(i, [1] * 64, SamplingParams(max_tokens=1))
            r.table_idx = pool.take_row()
            if first:
                r.device_len = first
                library(pool, [r])  # positions [0, first) hold their slots already
            r.cached_len = r.device_len = first
            reqs.append((r, steps))
        for k in range(max(len(s) for _, s in spec)):
            batch = [r for r, s in reqs if k < len(s)]
            for r, s in reqs:
                if k < len(s):
                    r.cached_len, r.device_len = r.device_len, r.device_len + s[k]
            desc = (f"page_size {ps}, step {k}: requests extending " +
                    ", ".join(f"[{r.cached_len}, {r.device_len})" for r in batch))
            free_before = pool.num_free_pages
            want_new = sum(-(-r.device_len // ps) - -(-r.cached_len // ps) for r in batch)
            out = call("assign_locations", module.assign_locations, pool, batch, on=desc)
            out = [int(x) for x in out]
            if len(out) != sum(r.extend_len for r in batch):
                raise Wrong(f"{desc}: your assign_locations returned {len(out)} slots for "
                            f"{sum(r.extend_len for r in batch)} new positions")
            taken = free_before - pool.num_free_pages
            if taken != want_new:
                raise Wrong(f"{desc}: your assign_locations took {taken} page(s) from the free list; only {want_new} "
                            f"position(s) start a new page (a partial last page is continued, not replaced)")
            j = 0
            for r in batch:
                row = pool.page_table[r.table_idx].tolist()
                for pos in range(r.cached_len, r.device_len):
                    if out[j] % ps != pos % ps:
                        raise Wrong(f"{desc}: position {pos} got slot {out[j]}, which is offset {out[j] % ps} in its "
                                    f"page; it must be offset {pos % ps} (slot = page * page_size + pos % page_size)")
                    if row[pos] != out[j]:
                        raise Wrong(f"{desc}: position {pos} got slot {out[j]} but its page-table entry says {row[pos]}")
                    j += 1
                for pos in range(r.device_len):
                    if row[pos] // ps != row[pos - pos % ps] // ps:
                        raise Wrong(f"{desc}: positions {pos - pos % ps} and {pos} of request {r.uid} share a logical "
                                    f"page but sit in different pages ({row[pos - pos % ps] // ps} and {row[pos] // ps})")
            held = [pool.page_table[r.table_idx, p].item() for r, _ in reqs for p in range(r.device_len)]
            if len(set(held)) != len(held) or any(s >= pool.num_pages * ps for s in held):
                raise Wrong(f"{desc}: two positions hold the same slot, or a slot lies outside the pool (the dummy page)")

    prop(histories, check, 80)
    with swapped([ex], lambda e: path):
        for case in PAGE_CASES:
            compare(case, "assign_locations")


def grade_free_tail(ex, path, module) -> None:
    import torch

    from ...paging import PagePool, cdiv
    from ...req import Req, SamplingParams

    def check(x):
        ps, matched_pages, own, start_pages, ahead = x
        pool = _pool(ps)
        r = Req(0, [1] * 96, SamplingParams(max_tokens=1))
        r.table_idx, r.device_len = pool.take_row(), matched_pages * ps + own
        PagePool.assign_locations(pool, [r])
        r.cached_len, r.matched_len = r.device_len, matched_pages * ps
        aligned = r.cached_len // ps * ps
        start = min(r.matched_len + start_pages * ps, aligned)  # _finish: what the cache took is not ours to free
        if ahead:  # in a step: `ahead` more positions assigned, not yet completed (device_len > cached_len)
            r.device_len += ahead
            PagePool.assign_locations(pool, [r])
        in_step = ahead > 0
        desc = f"page_size {ps}, cached_len {r.cached_len}, device_len {r.device_len}, start {start}, in_step={in_step}"
        pages = lambda end: sorted({int(s) // ps for s in pool.page_table[r.table_idx, start: end]})
        want = pages(r.device_len if in_step else r.cached_len)
        before = set(pool.free_pages.tolist())
        call("free_tail", module.free_tail, pool, r, start, in_step, on=desc)
        after = pool.free_pages.tolist()
        freed = sorted(set(after) - before)
        if len(after) != len(set(after)):
            raise Wrong(f"{desc}: after your free_tail a page is on the free list twice")
        if freed != want:
            hint = (" (in_step: the positions up to device_len, assigned this step, are the request's too)"
                    if in_step and freed == pages(r.cached_len) else
                    " (the partial last page belongs to the request too)" if set(freed) < set(want) else
                    " (pages before `start` belong to the prefix cache or were never the request's)")
            raise Wrong(f"{desc}: your free_tail gave back pages {freed}; the request owns {want} from position "
                        f"{start} on{hint}")
        if not all(isinstance(p, int) for p in after) or pool.free_pages.dtype != torch.int32:
            raise Wrong(f"{desc}: the free list must stay an int32 tensor of page numbers")

    prop(st.tuples(st.sampled_from([1, 2, 4]), st.integers(0, 3), st.integers(1, 11), st.integers(0, 3),
                   st.sampled_from([0, 0, 1, 3, 6])), check, 80)
    with swapped([ex], lambda e: path):
        for case in PAGE_CASES[1:]:  # page sizes > 1: where a partial last page exists
            compare(case, "free_tail")
