"""Chapter 3 exercises — the prefill budget. Write each function, then grade it:

    python -m minisgl_edu.exercises check 03

`pages_to_finish` replaces `minisgl_edu.prefill.pages_to_finish` (and the scheduler's import of it);
`try_add` replaces `PrefillAdder.try_add`. The grader compares your decisions with the library's on
random admission scenarios, then runs the real engine with small budgets, a tight KV pool and
shared prefixes: your schedule and your tokens must be the library's.
"""
from __future__ import annotations

import torch

from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)
from minisgl_edu.paging import cdiv  # cdiv(a, b) = ceil(a / b)
from minisgl_edu import prefill  # prefill.pages_to_finish: the library's (or, in the capstone, yours)


def pages_to_finish(req, page_size: int) -> int:
    """Pages `req` may still allocate from its current cached_len until max_device_len: the request's
    part of the reserved size. Positions [0, cached_len) already have their pages, and the last of
    those may be partial: the positions after cached_len in that page need no new page."""
    return cdiv(req.max_device_len, page_size) - cdiv(req.cached_len, page_size)


def try_add(self, req) -> bool:
    """PrefillAdder.try_add: admit `req` (fully or as a chunk) and return True, or leave it waiting and
    return False, appending the reason to self.log with self._stop("N: why"), N the condition that failed.

    The five conditions, in order, for a fresh request (req.table_idx < 0):
      1. a page-table row is free (self.pool.free_rows);
      2. token budget is left (self.token_budget > 0);
      3. its pages (prefill.pages_to_finish, after its matched prefix) + self.reserved_pages fit in
         self.available_pages();
      4. its matched prefix is locked (self.cache.lock(node));
      5. condition 3 re-checked after the lock (locking made the prefix unevictable).
    The matched prefix: self.cache.match_prefix(prompt) -> (node, locs); use whole pages only, and
    leave at least the last prompt token to compute (its logits give the first output token).
    On admission: take a row (self.pool.take_row()), copy the prefix's locs into the page table
    row, write the prompt into the token pool row, set req.cache_handle and req.matched_len.
    A request already running as a chunk (table_idx >= 0) skips all that and renews its reservation.
    Then: extend min(what is left of the prompt, the token budget) tokens (req.device_len), spend
    the budget, add the request's pages to self.reserved_pages and append it to self.added."""
    ps, fresh = self.pool.page_size, req.table_idx < 0
    if fresh and not self.pool.free_rows:
        return self._stop("1: no free page-table row")
    if self.token_budget <= 0:
        return self._stop("2: token budget spent")
    if fresh:
        node, locs = self.cache.match_prefix(req.token_ids[: req.prompt_len])
        matched = min(len(locs), (req.prompt_len - 1) // ps * ps)  # whole pages, and the last token computed
        req.cached_len = matched
        need = prefill.pages_to_finish(req, ps)
        if need + self.reserved_pages > self.available_pages():
            req.cached_len = 0
            return self._stop(f"3: needs {need} pages + {self.reserved_pages} reserved > {self.available_pages()} available")
        self.cache.lock(node)
        if need + self.reserved_pages > self.available_pages():
            self.cache.unlock(node)
            req.cached_len = 0
            return self._stop("5: no longer fits once its prefix is locked")
        req.cache_handle, req.matched_len = node, matched
        req.table_idx = self.pool.take_row()
        self.pool.page_table[req.table_idx, :matched] = locs[:matched]
        self.pool.token_pool[req.table_idx, : req.prompt_len] = torch.tensor(req.token_ids[: req.prompt_len],
                                                                             dtype=torch.int32)
    else:
        need = prefill.pages_to_finish(req, ps)  # a chunk continuing: its reservation is renewed
    chunk = min(req.prompt_len - req.cached_len, self.token_budget)
    req.device_len = req.cached_len + chunk
    self.token_budget -= chunk
    self.reserved_pages += need
    self.added.append(req)
    return True
