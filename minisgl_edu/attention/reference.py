"""The reference attention backend: readable PyTorch over the paged KV pool, one request at a time
(a decode step, one new token per request, runs as one padded batch)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..paging import to_device
from ..req import Batch
from .base import AttentionBackend


@dataclass
class RefMetadata:
    q_slices: list[tuple[int, int]]  # each request's rows in the flat batch of new tokens
    kv_locs: list[torch.Tensor]  # each request's slot locations for positions [0, device_len)
    cached_lens: list[int]
    # decode steps only (one new token per request): all requests at once, keys padded to the longest
    padded_locs: torch.Tensor | None = None  # [batch, longest] slot locations (padding repeats slot 0)
    key_mask: torch.Tensor | None = None  # [batch, 1, 1, longest] True where a key is real


class ReferenceBackend(AttentionBackend):
    def prepare(self, batch: Batch) -> None:
        q_slices, start = [], 0
        for r in batch.reqs:
            q_slices.append((start, start + r.extend_len))
            start += r.extend_len
        table = self.pool.page_table
        if not batch.is_prefill:
            n, dev = len(batch.reqs), table.device
            lens = np.fromiter((r.device_len for r in batch.reqs), np.int64, n)
            rows = to_device(np.fromiter((r.table_idx for r in batch.reqs), np.int64, n), dev)
            mask = torch.arange(int(lens.max()), device=dev)[None, :] < to_device(lens, dev)[:, None]
            locs = table[rows, : mask.shape[1]]  # past a request's length: stale but valid slots, masked out
            batch.attn_metadata = RefMetadata(q_slices, [], [], locs, mask[:, None, None, :])
            return
        batch.attn_metadata = RefMetadata(q_slices, [table[r.table_idx, : r.device_len] for r in batch.reqs],
                                          [r.cached_len for r in batch.reqs])

    def forward(self, q, k, v, layer, batch):
        self.kv.store(layer, batch.out_loc, k, v)
        md: RefMetadata = batch.attn_metadata
        if md.padded_locs is not None:  # decode: one query per request sees all of its keys
            kk = self.kv.k[layer][md.padded_locs].transpose(1, 2)  # [batch, kv_heads, longest, d]
            vv = self.kv.v[layer][md.padded_locs].transpose(1, 2)
            o = F.scaled_dot_product_attention(q[:, :, None], kk, vv, attn_mask=md.key_mask, enable_gqa=True)
            return o[:, :, 0]
        out = torch.empty_like(q)
        for (s, e), locs, cached in zip(md.q_slices, md.kv_locs, md.cached_lens):
            kk, vv = self.kv.k[layer][locs], self.kv.v[layer][locs]  # gather through the page table
            qq = q[s:e].transpose(0, 1)  # [heads, q_len, d]
            kk, vv = kk.transpose(0, 1), vv.transpose(0, 1)
            if cached == 0:
                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=e - s > 1, enable_gqa=True)
            else:  # query i sits at position cached + i and sees keys 0 .. cached + i
                mask = torch.arange(len(locs), device=q.device)[None, :] <= \
                    cached + torch.arange(e - s, device=q.device)[:, None]
                o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=True)
            out[s:e] = o.transpose(0, 1)
        return out
