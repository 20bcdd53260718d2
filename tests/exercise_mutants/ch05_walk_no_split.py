"""walk that follows a partly shared edge to its end instead of splitting it.

EXPECT: match_prefix returned
"""
from __future__ import annotations

import heapq

import numpy as np
import torch

from minisgl_edu.radix import Node, _common_len


def walk(self, key: np.ndarray) -> tuple[Node, int]:
    """RadixCache._walk: follow `key` down from self.root; return (the deepest node reached, its depth in
    tokens). At each node the child to follow is node.children[self._child_key(key[depth:])]; the
    shared length with its edge is _common_len(child.key, key[depth:]), rounded down to whole pages
    (self.page_size). Stop when nothing is shared; when only part of the edge is shared, cut it
    there with self._split(child, n) and continue from the upper part. Every node passed (the root
    included) gets last_access = one new tick of the clock (self._tick())."""
    node, depth, now = self.root, 0, self._tick()
    node.last_access = now
    while depth < len(key) and (child := node.children.get(self._child_key(key[depth:]))) is not None:
        n = _common_len(child.key, key[depth:])
        n -= n % self.page_size  # only whole pages are shared
        if n == 0:
            break
        if n < len(child.key):
            break
        child.last_access = now
        node, depth = child, depth + n
    return node, depth


