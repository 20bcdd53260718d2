"""Chapter 3 — Prefill budget and chunked prefill: what goes into this step, and how much of it?

Two budgets decide a prefill batch: the **token budget** (tokens this step may extend) and the
**reserved size** (pages admitted requests may still claim, so nothing is ever preempted).
`PrefillAdder.try_add` checks the five admission conditions in the chapter's order; a prompt larger
than what is left of the budget is *chunked* (`device_len < prompt_len`) and comes back first next step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .paging import PagePool, cdiv, to_device
from .req import Req


def pages_to_finish(req: Req, page_size: int) -> int:
    """Pages `req` may still allocate from its current cached_len until max_device_len."""
    return cdiv(req.max_device_len, page_size) - cdiv(req.cached_len, page_size)


def reserved_pages(reqs: list[Req], page_size: int) -> int:
    """pages_to_finish summed over `reqs`: the reserved size (inlined: every admission step sums the running batch)."""
    ps = page_size
    return sum((-r.cached_len // ps) - (r.max_device_len // -ps) for r in reqs) if ps > 1 else \
        sum(r.max_device_len - r.cached_len for r in reqs)


@dataclass
class PrefillAdder:
    token_budget: int
    reserved_pages: int  # the reserved size, counted in pages
    pool: PagePool
    cache: object
    added: list[Req] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # why admission stopped: for notebooks and traces

    def available_pages(self) -> int:
        return self.pool.num_free_pages + self.cache.evictable_size // self.pool.page_size

    def try_add(self, req: Req) -> bool:
        """Admit `req` (fully or as a chunk) and return True, or leave it waiting and return False."""
        ps, fresh = self.pool.page_size, req.table_idx < 0
        if fresh and not self.pool.free_rows:
            return self._stop("1: no free page-table row")
        if self.token_budget <= 0:
            return self._stop("2: token budget spent")
        if fresh:
            prompt = np.asarray(req.token_ids[: req.prompt_len], np.int32)  # once: the tree's key and the token pool's row
            node, locs = self.cache.match_prefix(prompt)
            # keep at least the last prompt token to compute: its logits give the first output token
            matched = min(len(locs), (req.prompt_len - 1) // ps * ps)
            req.cached_len = matched
            need = pages_to_finish(req, ps)
            if need + self.reserved_pages > self.available_pages():
                req.cached_len = 0
                return self._stop(f"3: needs {need} pages + {self.reserved_pages} reserved > {self.available_pages()} available")
            self.cache.lock(node)
            if need + self.reserved_pages > self.available_pages():
                self.cache.unlock(node)
                req.cached_len = 0
                return self._stop("5: no longer fits once its prefix is locked")
            req.cache_handle, req.matched_len = node, matched
            row = req.table_idx = self.pool.take_row()
            if matched:
                self.pool.page_table[row, :matched] = locs[:matched]
            self.pool.token_pool[row, : req.prompt_len].copy_(to_device(prompt, self.pool.device), non_blocking=True)
        else:
            need = pages_to_finish(req, ps)  # a chunked request continuing: its reservation is renewed
        chunk = min(req.prompt_len - req.cached_len, self.token_budget)
        req.device_len = req.cached_len + chunk
        self.token_budget -= chunk
        self.reserved_pages += need
        self.added.append(req)
        return True

    def _stop(self, why: str) -> bool:
        self.log.append(why)
        return False
