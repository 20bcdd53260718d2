"""Chapter 5 — Radix cache and eviction: which prefix is already computed, and what may be thrown away?

A radix tree keyed by token ids (whole pages when page_size > 1), a node holding a run of tokens
(`key`) and their KV slots (`value`). A locked node (ref_count > 0) is protected, an unlocked leaf
evictable, least recently used first: evictable_size + protected_size == the tokens in the tree.
`NaiveCache` has the same interface and shares nothing: the `--cache naive` twin.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(eq=False)
class Node:
    key: np.ndarray  # token ids of this edge
    value: torch.Tensor  # their KV slot locations
    parent: "Node | None" = None
    children: dict = field(default_factory=dict)
    ref_count: int = 0
    last_access: int = 0

    def __lt__(self, other: "Node") -> bool:  # heapq orders leaves by last access
        return self.last_access < other.last_access


def _common_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class RadixCache:
    def __init__(self, page_size: int = 1, device: torch.device | str = "cpu"):
        self.page_size, self.device = page_size, torch.device(device)
        self.root = Node(np.zeros(0, np.int32), torch.zeros(0, dtype=torch.int32, device=self.device))
        self.root.ref_count = 1  # the root is never evicted
        self.evictable_size = self.protected_size = 0
        self.clock = 0  # a counter, not wall time: every TP rank sees the same LRU order

    def _child_key(self, key: np.ndarray):
        return int(key[0]) if self.page_size == 1 else key[: self.page_size].tobytes()

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _split(self, node: Node, at: int) -> Node:
        """Cut node's edge at `at` tokens; return the new upper part (the parent of `node`)."""
        upper = Node(node.key[:at], node.value[:at], node.parent, {}, node.ref_count, node.last_access)
        upper.children[self._child_key(node.key[at:])] = node
        node.parent.children[self._child_key(node.key)] = upper
        node.key, node.value, node.parent = node.key[at:], node.value[at:], upper
        return upper

    def _walk(self, key: np.ndarray) -> tuple[Node, int]:
        """Follow key down the tree; split where it diverges. Return the deepest node and its depth."""
        node, depth, now = self.root, 0, self._tick()
        node.last_access = now
        while depth < len(key) and (child := node.children.get(self._child_key(key[depth:]))) is not None:
            n = _common_len(child.key, key[depth:])
            n -= n % self.page_size  # only whole pages are shared
            if n == 0:
                break
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            node, depth = child, depth + n
        return node, depth

    def match_prefix(self, token_ids) -> tuple[Node, torch.Tensor]:
        """Longest cached prefix of token_ids: (node to lock, slot locations of the prefix)."""
        key = np.asarray(token_ids, dtype=np.int32)
        node, depth = self._walk(key)
        values, n = [], node
        while n is not self.root:
            values.append(n.value)
            n = n.parent
        locs = torch.cat(values[::-1]) if values else self.root.value
        assert len(locs) == depth
        return node, locs

    def lock(self, node: Node) -> None:
        while node is not self.root:
            if node.ref_count == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.ref_count += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node is not self.root:
            node.ref_count -= 1
            assert node.ref_count >= 0, "unlock without lock"
            if node.ref_count == 0:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node = node.parent

    def insert_prefix(self, token_ids, locs: torch.Tensor) -> int:
        """Store (token_ids -> locs), page-aligned. Return how many leading tokens were already
        cached: the caller owns duplicate slots for those and must free them."""
        key = np.asarray(token_ids, dtype=np.int32)
        assert len(key) % self.page_size == 0 and len(key) == len(locs)
        node, depth = self._walk(key)
        if depth < len(key):
            leaf = Node(key[depth:].copy(), locs[depth:].clone(), node, last_access=self.clock)
            node.children[self._child_key(leaf.key)] = leaf
            self.evictable_size += len(leaf.key)
        return depth

    def evict(self, num_tokens: int) -> torch.Tensor:
        """Drop least-recently-used unlocked leaves until >= num_tokens are freed; return their slots."""
        leaves = [n for n in self._nodes() if not n.children and n.ref_count == 0]
        heapq.heapify(leaves)
        freed, total = [], 0
        while total < num_tokens and leaves:
            leaf = heapq.heappop(leaves)
            parent = leaf.parent
            del parent.children[self._child_key(leaf.key)]
            self.evictable_size -= len(leaf.key)
            freed.append(leaf.value)
            total += len(leaf.key)
            if parent is not self.root and not parent.children and parent.ref_count == 0:
                heapq.heappush(leaves, parent)
        return torch.cat(freed) if freed else self.root.value

    def _nodes(self):
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root:
                yield node
            stack.extend(node.children.values())

    @property
    def size(self) -> int:
        return self.evictable_size + self.protected_size

    def all_locations(self) -> torch.Tensor:
        vals = [n.value for n in self._nodes()]
        return torch.cat(vals) if vals else self.root.value

    def check_integrity(self) -> None:
        evictable = protected = 0
        for n in self._nodes():
            assert len(n.key) == len(n.value) and len(n.key) % self.page_size == 0 and len(n.key) > 0
            assert n.parent.children[self._child_key(n.key)] is n
            assert n.ref_count >= 0 and (n.parent is self.root or n.parent.ref_count >= n.ref_count)
            if n.ref_count:
                protected += len(n.key)
            else:
                evictable += len(n.key)
        assert (evictable, protected) == (self.evictable_size, self.protected_size), \
            f"size accounting drifted: counted {(evictable, protected)}, recorded {(self.evictable_size, self.protected_size)}"


class NaiveCache:
    """The naive twin: nothing matches, nothing is kept (`insert_prefix` reports all present: the caller frees it)."""

    def __init__(self, page_size: int = 1, device: torch.device | str = "cpu"):
        self.page_size = page_size
        self.root = None
        self._empty = torch.zeros(0, dtype=torch.int32, device=torch.device(device))
        self.evictable_size = self.protected_size = self.size = 0

    def match_prefix(self, token_ids):
        return None, self._empty

    def lock(self, node) -> None:
        pass

    def unlock(self, node) -> None:
        pass

    def insert_prefix(self, token_ids, locs) -> int:
        return len(token_ids)

    def evict(self, num_tokens: int) -> torch.Tensor:
        return self._empty

    def all_locations(self) -> torch.Tensor:
        return self._empty

    def check_integrity(self) -> None:
        pass


def make_cache(kind: str, page_size: int, device) -> RadixCache | NaiveCache:
    if kind not in ("radix", "naive"):
        raise ValueError(f"cache must be 'radix' or 'naive', got {kind!r}")
    return (RadixCache if kind == "radix" else NaiveCache)(page_size, device)
