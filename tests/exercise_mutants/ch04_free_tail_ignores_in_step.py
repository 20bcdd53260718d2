"""free_tail that ignores in_step: a request finished in the middle of a step keeps the pages of the positions
assigned in that step.

EXPECT: assigned this step, are
"""
from __future__ import annotations

import torch

from minisgl_edu.paging import cdiv


def free_tail(self, req, start: int, in_step: bool = False) -> None:
    """PagePool.free_tail: give back the request's own pages from position `start` (page-aligned)
    through its partial last page, with self.free(locs). self.free takes the slot locations of whole
    pages from a page boundary: the page-table entries of those positions. Between steps the
    request's positions end at cached_len; `in_step` (after assign_locations, before complete_one)
    they end at device_len."""
    ps = self.page_size
    end = cdiv(req.cached_len, ps) * ps  # include the partial last page
    if end > start:
        self.free(self.page_table[req.table_idx, start:end])
