from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from ..req import Batch


class AttentionBackend(ABC):
    def __init__(self, kv, pool):
        self.kv, self.pool = kv, pool  # the KV cache and the page table it is indexed through

    @abstractmethod
    def prepare(self, batch: Batch) -> None:
        """Build `batch.attn_metadata` once per step (after `batch.out_loc` is assigned)."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, batch: Batch) -> torch.Tensor:
        """Store k, v at batch.out_loc in `layer`'s pool, then attend q over each request's KV.
        q: [tokens, q_heads, d], k/v: [tokens, kv_heads, d] -> [tokens, q_heads, d]."""
