"""Chapter 7 — The FlashInfer backend: FlashInfer's paged prefill and decode kernels on the same indices.

`plan()` plans one wrapper per step from the `KernelArgs` (prefill, decode, or a CUDA graph's decode
wrapper); every layer runs it over a page_size-1 view of the KV pool the reference backend uses.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from ..model.layers import fused_kernels
from ..req import Batch
from .base import AttentionBackend
from .metadata import KernelArgs

CUDA_CORE_GROUP_SIZES = (1, 2, 3, 4, 8)  # GQA group sizes FlashInfer's CUDA-core decode kernel is built for


@dataclass
class FIMetadata:
    wrapper: Any  # the planned FlashInfer wrapper every layer runs this step
    args: KernelArgs
    out_loc: torch.Tensor  # int64 once per step, not converted again in every layer's K/V store


class FlashInferBackend(AttentionBackend):
    def __init__(self, kv, pool, num_q_heads: int, workspace_bytes: int = 128 << 20):
        super().__init__(kv, pool)
        import flashinfer  # GPU only: the CPU path never imports it
        self.fi = flashinfer
        _, _, self.kv_heads, self.head_dim = kv.k.shape
        self.q_heads, self.dtype = num_q_heads, kv.k.dtype
        dev = kv.k.device
        self.workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=dev)  # one, shared by all wrappers
        self.use_tensor_cores = num_q_heads // self.kv_heads not in CUDA_CORE_GROUP_SIZES
        # an experiment (issue 16): decode graphs of at most this many requests plan without split-KV (no merge
        # kernel), through the tensor-core kernel, the one whose planner can be told so; 0: off
        self.no_split_max_bs = int(os.environ.get("MINISGL_DECODE_NO_SPLIT_BS", "0"))
        self.prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD", backend="fa2")
        self.decode_wrapper = self._decode_wrapper()
        self.graph_wrappers: dict[tuple[int, int], Any] = {}  # a graph's (batch size, tokens) -> its wrapper (graphs.py)
        # page_size-1 view of each layer: [slots, 1 token per page, kv_heads, head_dim]
        self.pages = [(kv.k[i].unsqueeze(1), kv.v[i].unsqueeze(1)) for i in range(kv.k.shape[0])]

    def _decode_wrapper(self, bs: int = 0, indices_buf: torch.Tensor | None = None):
        """bs 0: the eager decode wrapper; bs > 0: one with fixed buffers, for a CUDA graph of that batch size."""
        dev = self.workspace.device
        graph = dict(use_cuda_graph=True, paged_kv_indptr_buffer=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
                     paged_kv_indices_buffer=indices_buf,
                     paged_kv_last_page_len_buffer=torch.ones(bs, dtype=torch.int32, device=dev)) if bs else {}
        tensor_cores = self.use_tensor_cores or 0 < bs <= self.no_split_max_bs
        return self.fi.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD", use_tensor_cores=tensor_cores,
                                                          backend="fa2", **graph)

    def _prefill_graph_wrapper(self, bs: int, indices_buf: torch.Tensor):
        """A prefill wrapper with fixed buffers: a graph of `bs` requests (its first plan fixes its total tokens)."""
        i32 = dict(dtype=torch.int32, device=self.workspace.device)
        return self.fi.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD", backend="fa2", use_cuda_graph=True, qo_indptr_buf=torch.zeros(bs + 1, **i32),
            paged_kv_indptr_buf=torch.zeros(bs + 1, **i32), paged_kv_indices_buf=indices_buf,
            paged_kv_last_page_len_buf=torch.ones(bs, **i32))

    def add_graph_wrapper(self, bs: int, indices_buf: torch.Tensor, tokens: int = 0) -> None:
        """A wrapper with fixed buffers for a graph (planned before each replay): a decode step of batch size
        `bs`, or (tokens > 0) a prefill step of `bs` requests and `tokens` query rows."""
        self.graph_wrappers[bs, tokens] = self._prefill_graph_wrapper(bs, indices_buf) if tokens else \
            self._decode_wrapper(bs, indices_buf)

    def plan(self, batch: Batch, args: KernelArgs) -> FIMetadata:
        common = dict(num_qo_heads=self.q_heads, num_kv_heads=self.kv_heads, page_size=1,
                      q_data_type=self.dtype, kv_data_type=self.dtype, non_blocking=True)
        if batch.is_prefill:
            w = self.graph_wrappers.get((batch.padded_size, batch.padded_tokens)) or self.prefill_wrapper
            # a graph's planner would split every request's KV (and merge the parts): its grid is fixed
            w.plan(args.cu_seqlens_q, args.cu_seqlens_k, args.kv_indices, args.last_page_len,
                   head_dim_qk=self.head_dim, causal=True, seq_lens=args.seq_lens_k,
                   disable_split_kv=w is not self.prefill_wrapper, **common)
        else:
            w = self.graph_wrappers.get((batch.padded_size, 0)) or self.decode_wrapper
            w.plan(args.cu_seqlens_k, args.kv_indices, args.last_page_len, head_dim=self.head_dim,
                   seq_lens=args.seq_lens_k, disable_split_kv=0 < batch.padded_size <= self.no_split_max_bs, **common)
        out_loc = batch.out_loc if batch.out_loc.dtype == torch.int64 else batch.out_loc.long()
        return FIMetadata(w, args, out_loc)

    def forward(self, q, k, v, layer, batch):
        md: FIMetadata = batch.attn_metadata
        if fused_kernels(k) is not None and (kv := side_by_side(k, v)) is not None:
            self.kv.store_kv(layer, md.out_loc, kv)  # K and V in one copy
        else:
            self.kv.store(layer, md.out_loc, k, v)
        return self.attend(q, layer, batch)

    def attend(self, q, layer, batch):
        """Attention over K/V already in the pool (the model's one-launch kernel stored them)."""
        return batch.attn_metadata.wrapper.run(q, self.pages[layer])

    def store_locations(self, batch) -> torch.Tensor:
        """This step's out_loc as int64, for a kernel that writes K/V into the pool itself."""
        return batch.attn_metadata.out_loc


def side_by_side(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """[2, tokens, heads, head_dim] view of K and V when V's columns follow K's in one buffer (the
    q|k|v projection's output, with q/k norm and RoPE done in place), else None."""
    n, heads, d = k.shape
    if k.stride(1) != d or k.stride(2) != 1 or v.stride() != k.stride() or \
            v.data_ptr() != k.data_ptr() + heads * d * k.element_size():
        return None
    return k.as_strided((2, n, heads, d), (heads * d, k.stride(0), d, 1))
