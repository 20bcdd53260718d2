"""Chapter 7 — Attention backends: the same interface over the same paged KV pool.

`ReferenceBackend` (plain PyTorch: the oracle, and the CPU path) and `FlashInferBackend` (GPU):
`prepare(batch)` once per step, then `forward(q, k, v, layer, batch)` once per layer.
"""
from __future__ import annotations

from .base import AttentionBackend
from .reference import ReferenceBackend


def make_backend(name: str, kv, pool, **kw) -> AttentionBackend:
    """`kw` (num_q_heads, workspace_bytes) are FlashInfer's: the reference backend reads the pool's shapes."""
    if name == "reference":
        return ReferenceBackend(kv, pool)
    if name == "flashinfer":
        from .flashinfer import FlashInferBackend
        return FlashInferBackend(kv, pool, **kw)
    raise ValueError(f"unknown attention backend {name!r} (reference | flashinfer)")
