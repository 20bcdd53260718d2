"""split that cuts the value one slot late: keys and KV locations no longer line up.

EXPECT: len(locs) == depth
"""
from __future__ import annotations

import heapq

import numpy as np
import torch

from minisgl_edu.radix import Node, _common_len


def split(self, node: Node, at: int) -> Node:
    """RadixCache._split: cut node's edge after `at` tokens and return the new upper node, which takes
    node's place under its parent (same ref_count and last_access: a lock through node covers both);
    node keeps the rest of its key and value and becomes the upper node's only child. The parent
    and the upper node find their children by self._child_key(first tokens of the child's key)."""
    upper = Node(node.key[:at], node.value[:at + 1], node.parent, {}, node.ref_count, node.last_access)
    upper.children[self._child_key(node.key[at:])] = node
    node.parent.children[self._child_key(node.key)] = upper
    node.key, node.value, node.parent = node.key[at:], node.value[at:], upper
    return upper


