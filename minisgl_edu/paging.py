"""Chapter 4 — Pages and the page table: where does each token's K/V live?

Slots are handed out a page at a time from a free list; a request's page-table row stores a **raw
slot location per position** (`page * page_size + pos % page_size`), so a kernel reads every page as
if it held one token. `token_pool` (same shape) holds the token ids on the device. After the last
real page comes the dummy page: the only one padding lanes (CUDA graphs) write.
"""
from __future__ import annotations

import numpy as np
import torch

from .req import Req


def cdiv(a, b):
    """Ceiling division, for ints and NumPy arrays alike (the one spelling in the library)."""
    return -(-a // b)


def to_device(a: np.ndarray, device: torch.device, host: bool = False) -> torch.Tensor:
    """Host array -> tensor for `device` through pinned memory, non-blocking: the CPU never waits for the
    stream (chapter 6). host=True stops at the pinned host tensor (FlashInfer's `plan()` copies it, chapter 7)."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    if torch.device(device).type != "cuda":
        return t
    t = t.pin_memory()  # the caching host allocator reuses the buffer safely
    return t if host else t.to(device, non_blocking=True)


def next_token_slots(reqs: list[Req], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each request's page-table row and `device_len`, on the device in one copy: where its next token goes in
    the token pool (the plain step's sampler and a decode graph's argmax write there)."""
    both = to_device(np.array([[r.table_idx for r in reqs], [r.device_len for r in reqs]], np.int64).reshape(2, -1), device)
    return both[0], both[1]


def extend_spans(reqs: list[Req]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What a step extends, flat over the batch: (cached_len per request, extend_len per request,
    page-table row per new token, position per new token). Shared by assign_locations and Engine.prepare."""
    cached = np.fromiter((r.cached_len for r in reqs), np.int64, len(reqs))
    ext = np.fromiter((r.extend_len for r in reqs), np.int64, len(reqs))
    rows = np.repeat(np.fromiter((r.table_idx for r in reqs), np.int64, len(reqs)), ext)
    ends = np.cumsum(ext)  # concat(arange(cached, cached + ext)) in NumPy: no tensor ops on the host each step
    return cached, ext, rows, np.arange(ends[-1] if len(ends) else 0) - np.repeat(ends - ext - cached, ext)


# the pool laid out [2, layers, slots, kv_heads, head_dim] (False: every layer's K, then every layer's V) or
# [layers, 2, ...] (True: a layer's K and V side by side). Either way each layer's K and each layer's V is one
# contiguous [slots, kv_heads, head_dim] block, all the kernels ask. An experiment, off: session 48 asks whether the
# H200's decode graph reads its K/V slower in the engine's pool than apart (bench_gpu.py layermajor; not yet run there)
KV_LAYER_MAJOR = False


class KVCache:
    """Per-layer K and V of shape [num_slots, kv_heads, head_dim]; the last page is the dummy page."""

    def __init__(self, num_layers: int, num_pages: int, page_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        num_slots = (num_pages + 1) * page_size
        self.layer_major = KV_LAYER_MAJOR
        lead = (num_layers, 2) if self.layer_major else (2, num_layers)
        # empty, not zeros: untouched slots cost no memory on the CPU; the dummy page is zeroed
        self.kv = torch.empty(*lead, num_slots, kv_heads, head_dim, dtype=dtype, device=device)
        # K and V side by side: one copy can write both (store_kv)
        self.k, self.v = (self.kv[:, 0], self.kv[:, 1]) if self.layer_major else (self.kv[0], self.kv[1])
        self.kv[:, :, num_pages * page_size:].zero_()
        self.dummy_page = num_pages
        # what one token's K and V take, over every layer: a decode step reads this per token of context
        self.bytes_per_token = 2 * num_layers * kv_heads * head_dim * self.kv.element_size()

    def store(self, layer: int, out_loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k[layer][out_loc] = k
        self.v[layer][out_loc] = v

    def store_kv(self, layer: int, out_loc: torch.Tensor, kv: torch.Tensor) -> None:
        """`store` in one kernel: kv is [2, tokens, kv_heads, head_dim] (K then V, any strides)."""
        (self.kv[layer] if self.layer_major else self.kv[:, layer]).index_copy_(1, out_loc, kv)


class PagePool:
    """The free list of pages, the page table and the token pool, plus the free table rows. A running
    request's row: [0, matched_len) the prefix cache's pages, [matched_len, cached_len) its own, then this step's."""

    def __init__(self, num_pages: int, page_size: int, max_running_reqs: int, max_seq_len: int,
                 device: torch.device):
        self.num_pages, self.page_size, self.device = num_pages, page_size, device
        self.max_seq_len = max_seq_len
        self.free_pages = torch.arange(num_pages, dtype=torch.int32, device=device)
        rows = max_running_reqs + 1  # the last row belongs to the dummy request used for padding
        self.page_table = torch.zeros(rows, max_seq_len, dtype=torch.int32, device=device)
        self.token_pool = torch.zeros(rows, max_seq_len, dtype=torch.int32, device=device)
        dummy = num_pages * page_size + torch.arange(max_seq_len, device=device) % page_size
        self.page_table[max_running_reqs] = dummy.to(torch.int32)
        self.dummy_row = max_running_reqs
        self.free_rows = list(range(max_running_reqs))
        self.evict_fn = None  # set by the scheduler: frees pages from the prefix cache on demand

    # ---- pages ---------------------------------------------------------------------------------
    @property
    def num_free_pages(self) -> int:
        return int(self.free_pages.numel())

    def take_pages(self, n: int) -> torch.Tensor:
        if n > self.num_free_pages and self.evict_fn is not None:
            self.free(self.evict_fn((n - self.num_free_pages) * self.page_size))
        if n > self.num_free_pages:
            raise RuntimeError(f"out of KV pages: need {n}, have {self.num_free_pages}")
        pages, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return pages

    def free(self, locs: torch.Tensor) -> None:
        """Return the pages behind `locs`, which must cover whole pages starting at a page boundary."""
        if locs.numel():
            self.free_pages = torch.cat([self.free_pages, (locs[:: self.page_size] // self.page_size).to(torch.int32)])

    def pages_of(self, req: Req, start: int | None = None, in_step: bool = False) -> torch.Tensor:
        """The pages `req` holds itself, from `start` (page-aligned; default matched_len) through its partial
        last page: cached_len between steps, device_len `in_step` (after assign_locations, before complete_one)."""
        ps, end = self.page_size, req.device_len if in_step else req.cached_len
        start = req.matched_len if start is None else start
        return self.page_table[req.table_idx, start: cdiv(end, ps) * ps: ps] // ps  # one slot names its page

    def free_tail(self, req: Req, start: int, in_step: bool = False) -> None:
        """Free a request's own pages from position `start` (page-aligned) through its partial last page."""
        self.free_pages = torch.cat([self.free_pages, self.pages_of(req, start, in_step)])

    def check_integrity(self, reqs: list[Req], other_locs: torch.Tensor | None = None, busy_rows: int = 0,
                        in_step: bool = False) -> None:
        """free pages + pages behind `other_locs` (the prefix cache's) + `pages_of` each live request ==
        all pages, no page twice; free rows + their rows + `busy_rows` (deferred) == all rows but the dummy."""
        held = [self.pages_of(r, in_step=in_step) for r in reqs if r.table_idx >= 0]
        other = self.free_pages[:0] if other_locs is None else other_locs[:: self.page_size] // self.page_size
        pages = torch.cat([self.free_pages.long(), other.long()] + [h.long() for h in held])
        assert len(pages) == self.num_pages, f"page leak: {self.num_free_pages} free + {len(other)} cached + " \
                                             f"{sum(map(len, held))} held != {self.num_pages}"
        assert len(torch.unique(pages)) == len(pages), "a page is counted twice"
        assert len(self.free_rows) + len(held) + busy_rows == self.dummy_row, "page-table row leak"

    # ---- rows ----------------------------------------------------------------------------------
    def take_row(self) -> int:
        return self.free_rows.pop()

    def release_row(self, row: int) -> None:
        self.free_rows.append(row)

    # ---- locations for one step ----------------------------------------------------------------
    def assign_locations(self, reqs: list[Req]) -> torch.Tensor:
        """Give every position in [cached_len, device_len) a slot (a partial last page first); return out_loc."""
        ps = self.page_size
        cached, ext, rows, pos = extend_spans(reqs)
        to_dev = lambda a: to_device(a, self.device)
        if ps == 1:  # every position opens its own page, in order: out_loc is the pages themselves
            pages = self.take_pages(len(pos))
            flat = to_dev(rows * self.page_table.shape[1] + pos)  # one copy, one write into the flat table
            self.page_table.view(-1).index_copy_(0, flat, pages)
            return pages
        first_new = cdiv(cached, ps)  # logical pages below this already exist
        new_pages = cdiv(cached + ext, ps) - first_new
        lp = pos // ps
        is_new = lp >= np.repeat(first_new, ext)
        order = np.repeat(np.cumsum(new_pages) - new_pages - first_new, ext) + lp  # index into `pages`
        pages = self.take_pages(int(new_pages.sum()))
        rows_t, pos_t = to_dev(np.stack([rows, pos]))  # one copy to the device
        if is_new.all():  # the common case
            loc = pages[to_dev(order)] * ps + (pos_t % ps).to(torch.int32)
        else:
            loc = torch.empty(len(pos), dtype=torch.int32, device=self.device)
            new_t, old_t = to_dev(np.flatnonzero(is_new)), to_dev(np.flatnonzero(~is_new))
            loc[new_t] = pages[to_dev(order[is_new])] * ps + (pos_t[new_t] % ps).to(torch.int32)
            page_start = self.page_table[rows_t[old_t], (pos_t[old_t] // ps) * ps]
            loc[old_t] = page_start + (pos_t[old_t] % ps).to(torch.int32)
        self.page_table[rows_t, pos_t] = loc
        return loc
