"""The reference attention backend: readable PyTorch over the paged KV pool, reading the same
`KernelArgs` as FlashInfer (chapter 7). Request i's queries are rows cu_seqlens_q[i]:cu_seqlens_q[i+1]
of the batch, its keys the slots kv_indices[cu_seqlens_k[i]:cu_seqlens_k[i+1]]; one request at a
time, except a decode step (one query per request), which runs as one padded batch."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..req import Batch
from .base import AttentionBackend
from .metadata import KernelArgs


@dataclass
class RefMetadata:
    args: KernelArgs
    spans: list[tuple[int, int, int, int]]  # per request: its query rows [qs, qe), its kv_indices [ks, ke)
    # decode steps only (one query per request): all requests at once, keys padded to the longest
    padded_locs: torch.Tensor | None = None  # [batch, longest] slots of the keys
    key_mask: torch.Tensor | None = None  # [batch, 1, 1, longest] True where a key is real


class ReferenceBackend(AttentionBackend):
    def plan(self, batch: Batch, args: KernelArgs) -> RefMetadata:
        cu_q, cu_k = args.cu_seqlens_q.tolist(), args.cu_seqlens_k.tolist()  # host tensors: no device sync
        spans = list(zip(cu_q, cu_q[1:], cu_k, cu_k[1:]))
        if batch.is_prefill:
            return RefMetadata(args, spans)
        lens, starts = args.seq_lens_k.long(), args.cu_seqlens_k[:-1, None].long()
        cols = torch.arange(int(lens.max()))
        mask = cols[None, :] < lens[:, None]
        entries = torch.where(mask, starts + cols, starts)  # past a request's keys: its first one, masked out
        dev = args.kv_indices.device
        return RefMetadata(args, spans, args.kv_indices[entries.to(dev)], mask[:, None, None, :].to(dev))

    def forward(self, q, k, v, layer, batch):
        self.kv.store(layer, batch.out_loc, k, v)
        md: RefMetadata = batch.attn_metadata
        keys, values = self.kv.k[layer], self.kv.v[layer]
        if md.padded_locs is not None:  # decode: one query per request sees all of its keys
            kk = keys[md.padded_locs].transpose(1, 2)  # [batch, kv_heads, longest, d]
            vv = values[md.padded_locs].transpose(1, 2)
            o = F.scaled_dot_product_attention(q[:, :, None], kk, vv, attn_mask=md.key_mask, enable_gqa=True)
            return o[:, :, 0]
        out = torch.empty_like(q)
        for qs, qe, ks, ke in md.spans:
            locs = md.args.kv_indices[ks:ke]  # gather through the page table
            qq, kk, vv = q[qs:qe].transpose(0, 1), keys[locs].transpose(0, 1), values[locs].transpose(0, 1)
            cached = (ke - ks) - (qe - qs)  # query j sits at position cached + j and sees keys 0 .. cached + j
            if cached == 0:
                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=qe - qs > 1, enable_gqa=True)
            else:
                mask = torch.arange(ke - ks, device=q.device)[None, :] <= \
                    cached + torch.arange(qe - qs, device=q.device)[:, None]
                o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=True)
            out[qs:qe] = o.transpose(0, 1)
        return out
