"""Chapter 5 exercises — the radix cache. Write each function, then grade it:

    python -m minisgl_edu.exercises check 05

`walk` replaces `RadixCache._walk` (the walk behind match_prefix and insert_prefix), `split`
replaces `RadixCache._split`, `evict` replaces `RadixCache.evict`. The grader runs random sequences
of insert / match / lock / unlock / evict on your tree and on the library's, compares every answer
and checks the tree's integrity after each, then runs the real engine with shared prefixes and a
tight pool (evictions): cache hits and tokens must be the library's.
"""
from __future__ import annotations

import heapq

import numpy as np
import torch

from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)
from minisgl_edu.radix import Node, _common_len  # Node(key, value, parent, children, ref_count, last_access)


def walk(self, key: np.ndarray) -> tuple[Node, int]:
    """RadixCache._walk: follow `key` down from self.root; return (the deepest node reached, its depth in
    tokens). At each node the child to follow is node.children[self._child_key(key[depth:])]; the
    shared length with its edge is _common_len(child.key, key[depth:]), rounded down to whole pages
    (self.page_size). Stop when nothing is shared; when only part of the edge is shared, cut it
    there with self._split(child, n) and continue from the upper part. Every node passed (the root
    included) gets last_access = one new tick of the clock (self._tick())."""
    raise NotAttempted  # your code here


def split(self, node: Node, at: int) -> Node:
    """RadixCache._split: cut node's edge after `at` tokens and return the new upper node, which takes
    node's place under its parent (same ref_count and last_access: a lock through node covers both);
    node keeps the rest of its key and value and becomes the upper node's only child. The parent
    and the upper node find their children by self._child_key(first tokens of the child's key)."""
    raise NotAttempted  # your code here


def evict(self, num_tokens: int) -> torch.Tensor:
    """RadixCache.evict: drop least-recently-used *unlocked leaves* (no children, ref_count 0) until at
    least num_tokens tokens are freed (or none is left); return their slot locations (one tensor; an
    empty one is self.root.value). A parent left childless and unlocked becomes a leaf that may go
    too. Keep the books: self.evictable_size goes down by every token dropped. (self._nodes() walks
    every node; Node objects order by last_access, so heapq works on them.)"""
    raise NotAttempted  # your code here
