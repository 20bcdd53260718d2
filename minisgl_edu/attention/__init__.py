"""Attention backends: the same interface over the same paged KV pool.

* `ReferenceBackend` — plain PyTorch, one request at a time: the oracle, and the CPU path.
* `FlashInferBackend` (GPU) — FlashInfer's paged prefill/decode kernels on the same indices.

A backend is used in two phases per step: `prepare(batch)` once (the ledger becomes the
`KernelArgs` both backends read, `metadata.py`, chapter 7), then `forward(q, k, v, layer, batch)`
once per layer.
"""
from __future__ import annotations

from .base import AttentionBackend
from .reference import ReferenceBackend


def make_backend(name: str, kv, pool, **kw) -> AttentionBackend:
    if name == "reference":
        return ReferenceBackend(kv, pool)
    if name == "flashinfer":
        from .flashinfer import FlashInferBackend
        return FlashInferBackend(kv, pool, **kw)
    raise ValueError(f"unknown attention backend {name!r} (reference | flashinfer)")
