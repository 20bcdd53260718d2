from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from ..req import Batch
from .metadata import KernelArgs, kernel_args


class AttentionBackend(ABC):
    def __init__(self, kv, pool):
        self.kv, self.pool = kv, pool  # the KV cache and the page table it is indexed through

    def prepare(self, batch: Batch) -> None:
        """Once per step (after `batch.out_loc` is assigned): the ledger becomes kernel arguments
        (chapter 7), from which the backend plans `batch.attn_metadata`."""
        batch.attn_metadata = self.plan(batch, kernel_args(batch.reqs, self.pool, self.lanes(batch), batch.padded_tokens))

    def lanes(self, batch: Batch) -> int:
        """The lanes a step's kernel arguments hold: its requests padded to its graph's size (0: no padding)."""
        return batch.padded_size

    @abstractmethod
    def plan(self, batch: Batch, args: KernelArgs) -> Any:
        """What every layer's `forward` reads this step, built from `args`."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, batch: Batch) -> torch.Tensor:
        """Store k, v at batch.out_loc in `layer`'s pool, then attend q over each request's KV.
        q: [tokens, q_heads, d], k/v: [tokens, kv_heads, d] -> [tokens, q_heads, d]."""
