"""free_tail that ignores `start` and frees from position 0: the cached prefix's pages too.

EXPECT: before `start`
"""
from __future__ import annotations

import torch

from minisgl_edu.paging import cdiv


def free_tail(self, req, start: int) -> None:
    """PagePool.free_tail: give back the request's own pages from position `start` (page-aligned) to
    its cached_len, the partial last page included, with self.free(locs). self.free takes the slot
    locations of whole pages from a page boundary: the page-table entries of those positions."""
    ps = self.page_size
    end = cdiv(req.cached_len, ps) * ps  # include the partial last page
    if end > start:
        self.free(self.page_table[req.table_idx, 0:end])
