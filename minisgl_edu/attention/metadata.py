"""Chapter 7 — From the ledger to kernel arguments: what exactly does the attention kernel read?

`kernel_args()` turns the ledgers (`cached_len`, `device_len`, page-table rows) into the flat arrays
both backends read, once per step. Every page counts as one token (the table stores raw slots);
a CUDA-graph batch's padding lanes read and write only the dummy page.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..paging import PagePool, to_device
from ..req import Req


@dataclass
class KernelArgs:
    """Everything the kernel reads about a batch, built from the ledger (one per step)."""
    cu_seqlens_q: torch.Tensor  # [B+1] int32, host: prefix sums of extend_len
    cu_seqlens_k: torch.Tensor  # [B+1] int32, host: prefix sums of device_len (the KV indptr)
    seq_lens_k: torch.Tensor  # [B] int32, host: device_len per request
    kv_indices: torch.Tensor  # [cu_seqlens_k[-1]] int32, device: slot of every (request, position)
    last_page_len: torch.Tensor  # [B] int32, host: all ones, every "page" holds one token
    num_padding: int  # lanes added to reach a captured CUDA-graph size (dummy requests)


def kernel_args(reqs: list[Req], pool: PagePool, padded_size: int = 0, padded_tokens: int = 0) -> KernelArgs:
    """Translate the ledgers of `reqs` (plus padding lanes up to `padded_size`) into kernel arguments; with
    `padded_tokens` (a prefill-step graph) the last padding lane also takes the tokens up to that capacity."""
    dev = pool.device
    pads = max(0, padded_size - len(reqs))
    rows = np.array([r.table_idx for r in reqs] + [pool.dummy_row] * pads, np.int64)
    ext = np.array([r.extend_len for r in reqs] + [1] * pads, np.int64)  # a padding lane: one query token
    kv_len = np.array([r.device_len for r in reqs] + [1] * pads, np.int64)  # ... attending to one key
    if pads and padded_tokens:  # the graph was planned for exactly padded_tokens query rows: fill the slack
        slack = padded_tokens - int(ext.sum())
        ext[-1] += slack
        kv_len[-1] += slack  # causal over the dummy row: every key is the dummy slot
    cu_q = np.concatenate([[0], np.cumsum(ext)])
    cu_k = np.concatenate([[0], np.cumsum(kv_len)])
    total = int(cu_k[-1])
    # gather the slots on the device from B-sized inputs (not a copy of every index from the host), sent in
    # one copy: entry p of request i is flat page-table entry rows[i] * width + p, at kv_indices[cu_k[i] + p]
    width = pool.page_table.shape[1]
    start_len = to_device(np.stack([rows * width - cu_k[:-1], kv_len]), dev)
    flat = torch.repeat_interleave(start_len[0], start_len[1], output_size=total) + torch.arange(total, device=dev)
    kv_indices = pool.page_table.view(-1)[flat]
    # the planner reads these on the host: one pinned buffer, four views
    host = to_device(np.concatenate([cu_q, cu_k, kv_len, np.ones(len(rows), np.int64)]).astype(np.int32), dev, host=True)
    b = len(rows)
    return KernelArgs(host[:b + 1], host[b + 1:2 * b + 2], host[2 * b + 2:3 * b + 2], kv_indices, host[3 * b + 2:], pads)
