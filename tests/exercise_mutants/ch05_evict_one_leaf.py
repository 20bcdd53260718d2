"""evict that drops only one leaf, however many tokens were asked for.

EXPECT: evict freed
"""
from __future__ import annotations

import heapq

import numpy as np
import torch

from minisgl_edu.radix import Node, _common_len


def evict(self, num_tokens: int) -> torch.Tensor:
    """RadixCache.evict: drop least-recently-used *unlocked leaves* (no children, ref_count 0) until at
    least num_tokens tokens are freed (or none is left); return their slot locations (one tensor; an
    empty one is self.root.value). A parent left childless and unlocked becomes a leaf that may go
    too. Keep the books: self.evictable_size goes down by every token dropped. (self._nodes() walks
    every node; Node objects order by last_access, so heapq works on them.)"""
    leaves = [n for n in self._nodes() if not n.children and n.ref_count == 0]
    heapq.heapify(leaves)
    freed, total = [], 0
    while total < min(num_tokens, 1) and leaves:
        leaf = heapq.heappop(leaves)
        parent = leaf.parent
        del parent.children[self._child_key(leaf.key)]
        self.evictable_size -= len(leaf.key)
        freed.append(leaf.value)
        total += len(leaf.key)
        if parent is not self.root and not parent.children and parent.ref_count == 0:
            heapq.heappush(leaves, parent)
    return torch.cat(freed) if freed else self.root.value
