"""assign_locations that opens a new page for every step, never continuing a partial page.

EXPECT: took
"""
from __future__ import annotations

import torch

from minisgl_edu.paging import cdiv


def assign_locations(self, reqs) -> torch.Tensor:
    """PagePool.assign_locations: give every position in [cached_len, device_len) of every request a
    slot, write it into the request's page-table row (self.page_table[req.table_idx, pos]) and return
    all of them, request after request, as one int32 tensor (out_loc).

    A slot is page * page_size + pos % page_size. A position continues its request's last, partial
    page when there is one (the page of position pos - 1, read back from the page table) and
    otherwise opens a fresh page: self.take_pages(n) hands out n page numbers (it may evict)."""
    ps, out = self.page_size, []
    for r in reqs:
        have = r.cached_len // ps if r.cached_len % ps == 0 else -1  # logical pages [0, have) exist already; the last may be partial
        pages = self.take_pages(cdiv(r.device_len, ps) - have).tolist()
        for pos in range(r.cached_len, r.device_len):
            lp, off = divmod(pos, ps)
            page = int(self.page_table[r.table_idx, lp * ps]) // ps if lp < have else pages[lp - have]
            out.append(page * ps + off)
        self.page_table[r.table_idx, r.cached_len: r.device_len] = torch.tensor(out[len(out) - r.extend_len:],
                                                                                dtype=torch.int32)
    return torch.tensor(out, dtype=torch.int32, device=self.device)


