"""Chapter 4 exercises — pages and the page table. Write each function, then grade it:

    python -m minisgl_edu.exercises check 04

`assign_locations` replaces `PagePool.assign_locations`, `free_tail` replaces `PagePool.free_tail`.
The grader checks the page-table invariants on random batches (page sizes 1, 2, 4, 8), then runs
the real engine with page sizes 1, 2 and 4: its tokens must be the library's and no page may leak.
"""
from __future__ import annotations

import torch

from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)
from minisgl_edu.paging import cdiv  # cdiv(a, b) = ceil(a / b)


def assign_locations(self, reqs) -> torch.Tensor:
    """PagePool.assign_locations: give every position in [cached_len, device_len) of every request a
    slot, write it into the request's page-table row (self.page_table[req.table_idx, pos]) and return
    all of them, request after request, as one int32 tensor (out_loc).

    A slot is page * page_size + pos % page_size. A position continues its request's last, partial
    page when there is one (the page of position pos - 1, read back from the page table) and
    otherwise opens a fresh page: self.take_pages(n) hands out n page numbers (it may evict)."""
    raise NotAttempted  # your code here


def free_tail(self, req, start: int, in_step: bool = False) -> None:
    """PagePool.free_tail: give back the request's own pages from position `start` (page-aligned)
    through its partial last page, with self.free(locs). self.free takes the slot locations of whole
    pages from a page boundary: the page-table entries of those positions. Between steps the
    request's positions end at cached_len; `in_step` (after assign_locations, before complete_one)
    they end at device_len."""
    raise NotAttempted  # your code here
