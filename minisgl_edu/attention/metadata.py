"""Chapter 7 — From the ledger to kernel arguments: what exactly does the attention kernel read?

`kernel_args()` turns the ledgers (`cached_len`, `device_len`, page-table rows) into the flat arrays
both backends read, once per step. Every page counts as one token (the table stores raw slots);
a CUDA-graph batch's padding lanes read and write only the dummy page.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from ..model import qk_kernel
from ..model.layers import KERNELS
from ..paging import PagePool, cdiv, to_device
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


class PadLane(NamedTuple):
    """A padding lane where a real request's lanes follow it (a mixed graph's decode rows padded in one plan):
    one query on the dummy row, attending to one key."""
    table_idx: int
    extend_len: int = 1
    device_len: int = 1


def mixed_lanes(reqs: list, decode_rows: int, padded_size: int, dummy_row: int) -> list:
    """A mixed step's lanes in its graph rows' order (graphs.replay_prefill): the decode rows, their padding lanes
    up to `padded_size`, then the prompts (kernel_args adds the prompt lanes' padding). One kernel_args over them
    serves one prefill plan, or both kernels through split_args."""
    return reqs[:decode_rows] + [PadLane(dummy_row)] * (padded_size - decode_rows) + reqs[decode_rows:]


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
    total, b = int(cu_k[-1]), len(rows)
    # the planner reads these on the host: one pinned buffer, four views (and the rows, for the gather)
    host = to_device(np.concatenate([cu_q, cu_k, kv_len, np.ones(b, np.int64), rows]).astype(np.int32), dev, host=True)
    kv_indices = gather_slots(pool, host, b, total) if KERNELS.fused else None  # our kernel: one launch
    if kv_indices is None:  # the twin: gather the slots on the device from B-sized inputs, sent in one copy:
        # entry p of request i is flat page-table entry rows[i] * width + p, at kv_indices[cu_k[i] + p]
        width = pool.page_table.shape[1]
        start_len = to_device(np.stack([rows * width - cu_k[:-1], kv_len]), dev)
        flat = torch.repeat_interleave(start_len[0], start_len[1], output_size=total) + torch.arange(total, device=dev)
        kv_indices = pool.page_table.view(-1)[flat]
    return KernelArgs(host[:b + 1], host[b + 1:2 * b + 2], host[2 * b + 2:3 * b + 2], kv_indices,
                      host[3 * b + 2:4 * b + 2], pads)


def split_args(args: KernelArgs, split: int, decode_rows: int) -> tuple[KernelArgs, KernelArgs]:
    """A mixed step's KernelArgs over `mixed_lanes` as two: the first `split` lanes (the decode rows, padded) for
    the decode kernel, the rest for the prefill kernel. Views of one kernel_args (one copy, one gather launch);
    only the prompt part's prefix sums are new, rebased to start at 0 (a small pinned buffer, no copy)."""
    cu_q, cu_k = args.cu_seqlens_q.numpy(), args.cu_seqlens_k.numpy()
    k0, n = int(cu_k[split]), len(cu_q) - split  # the prompt part's first key; its prefix sums' length
    rebased = to_device(np.concatenate([cu_q[split:] - cu_q[split], cu_k[split:] - k0]), args.kv_indices.device, host=True)
    decode = KernelArgs(args.cu_seqlens_q[:split + 1], args.cu_seqlens_k[:split + 1], args.seq_lens_k[:split],
                        args.kv_indices[:k0], args.last_page_len[:split], split - decode_rows)
    prompts = KernelArgs(rebased[:n], rebased[n:], args.seq_lens_k[split:], args.kv_indices[k0:],
                         args.last_page_len[split:], args.num_padding)
    return decode, prompts


@dataclass
class Pages:
    """What FlashInfer reads of a step's keys when a page holds page_size tokens: each lane's pages, end to end.

    A lane of device_len L has cdiv(L, page_size) pages; its page j is the page of position j * page_size:

        positions  | 0 .. ps-1 | ps .. 2ps-1 | ... | (n-1)ps .. L-1      (n = cdiv(L, ps))
        page ids   | page_table[row, 0] // ps | page_table[row, ps] // ps | ... (each page's first slot // ps)
        last_page_len = L - (n - 1) * ps, in 1 .. ps

    With page_size 1 these are kernel_args' own arrays (a slot is a page of one token)."""
    indptr: torch.Tensor  # [B+1] int32, host: 0, then prefix sums of the lanes' page counts
    indices: torch.Tensor  # [indptr[-1]] int32, device: page ids
    last_page_len: torch.Tensor  # [B] int32, host: tokens in each lane's last page


def without_last_lane(args: KernelArgs) -> KernelArgs:
    """`args` less its last lane (a padding lane), as views: the same step for a wrapper with one lane fewer."""
    b = len(args.seq_lens_k) - 1
    return KernelArgs(args.cu_seqlens_q[:b + 1], args.cu_seqlens_k[:b + 1], args.seq_lens_k[:b],
                      args.kv_indices[:int(args.cu_seqlens_k[b])], args.last_page_len[:b], args.num_padding - 1)


def page_args(args: KernelArgs, page_size: int) -> Pages:
    """kernel_args' slots as pages of `page_size` tokens: every page's first slot, divided by the page size (one
    copy of the entries to read, one gather, one division)."""
    if page_size == 1:
        return Pages(args.cu_seqlens_k, args.kv_indices, args.last_page_len)
    seq, cu_k = args.seq_lens_k.numpy().astype(np.int64), args.cu_seqlens_k.numpy().astype(np.int64)
    n = cdiv(seq, page_size)
    cu_p = np.concatenate([[0], np.cumsum(n)])
    # entry e = cu_p[i] + j (page j of lane i) reads slot entry cu_k[i] + j * page_size
    first = np.repeat(cu_k[:-1] - cu_p[:-1] * page_size, n) + np.arange(cu_p[-1]) * page_size
    host = to_device(np.concatenate([cu_p, seq - (n - 1) * page_size]).astype(np.int32), args.kv_indices.device, host=True)
    slots = args.kv_indices[to_device(first, args.kv_indices.device)]
    b = len(seq)
    return Pages(host[:b + 1], slots // page_size, host[b + 1:])


def gather_slots(pool: PagePool, host: torch.Tensor, b: int, total: int) -> torch.Tensor | None:
    """kernel_args' slots by our one-launch kernel (model/kv_indices.cu), from one copy of the pinned buffer
    (cu_k at [b + 1, 2b + 2), the rows at [4b + 2, 5b + 2)); None off CUDA or without the cubin."""
    if not pool.page_table.is_cuda:
        return None
    meta = host.to(pool.device, non_blocking=True)
    return qk_kernel.kv_indices(pool.page_table, meta[4 * b + 2:], meta[b + 1:2 * b + 2], total)
