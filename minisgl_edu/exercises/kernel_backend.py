"""Chapter 7's grading backend: attention on the CPU driven only by `kernel_args()`, the way FlashInfer is.

The CPU reference backend reads the page table directly, so on a CPU the kernel arguments are never
used. This backend reads nothing else: request i's queries are rows cu_seqlens_q[i]:cu_seqlens_q[i+1],
its keys the slots kv_indices[cu_seqlens_k[i]:cu_seqlens_k[i+1]], causal with the cached prefix's
offset. Decode batches are padded to a captured size (graphs.capture_sizes), and the padding lanes
must point at the dummy page only. Wrong arguments give wrong tokens, as they would on a GPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import Wrong

MAX_BS = 8  # the captured sizes 1, 2, 4, 8: the graders' batches fit


def install(fn, original):
    """Adapter for the ch07 exercise: `kernel_args` itself, and `make_backend` building this backend
    where the engine would build the reference one."""
    if getattr(original, "__name__", "") != "make_backend":
        return fn

    def make_backend(name, kv, pool, **kw):
        return KernelArgsBackend(kv, pool) if name == "reference" else original(name, kv, pool, **kw)
    return make_backend


class KernelArgsBackend:
    def __init__(self, kv, pool):
        self.kv, self.pool = kv, pool

    def prepare(self, batch) -> None:
        from ..attention import flashinfer as fi  # looked up per call: the exercise swaps fi.kernel_args
        from ..graphs import capture_sizes, pad_to
        bs = len(batch.reqs)
        padded = pad_to(capture_sizes(MAX_BS), bs) if not batch.is_prefill and bs <= MAX_BS else 0
        args = fi.kernel_args(batch.reqs, self.pool, padded)
        lanes = max(padded, bs)
        if len(args.cu_seqlens_q) != lanes + 1 or len(args.cu_seqlens_k) != lanes + 1:
            raise Wrong(f"a decode batch of {bs} padded to {padded}: your kernel_args gave {len(args.cu_seqlens_q) - 1} "
                        f"query lanes and {len(args.cu_seqlens_k) - 1} key lanes; there are {lanes}")
        dummy = self.pool.num_pages * self.pool.page_size
        cu_k = args.cu_seqlens_k.tolist()
        for lane in range(bs, lanes):
            slots = args.kv_indices[cu_k[lane]: cu_k[lane + 1]].tolist()
            if not slots or min(slots) < dummy:
                raise Wrong(f"a decode batch of {bs} padded to {padded}: padding lane {lane} reads slots {slots}, "
                            f"not the dummy page (slots from {dummy}): it would touch a real request's KV")
        batch.attn_metadata = args

    def forward(self, q, k, v, layer, batch):
        self.kv.store(layer, batch.out_loc, k, v)
        args = batch.attn_metadata
        cu_q, cu_k = args.cu_seqlens_q.tolist(), args.cu_seqlens_k.tolist()
        out = torch.zeros_like(q)
        for i in range(len(batch.reqs)):  # the real lanes; padding lanes have no query rows on the CPU
            qs, qe, ks, ke = cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]
            locs = args.kv_indices[ks:ke].long()
            qq = q[qs:qe].transpose(0, 1)
            kk, vv = self.kv.k[layer][locs].transpose(0, 1), self.kv.v[layer][locs].transpose(0, 1)
            offset = (ke - ks) - (qe - qs)  # query j sits at position offset + j
            mask = torch.arange(ke - ks)[None, :] <= offset + torch.arange(qe - qs)[:, None]
            o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=True)
            out[qs:qe] = o.transpose(0, 1)
        return out
