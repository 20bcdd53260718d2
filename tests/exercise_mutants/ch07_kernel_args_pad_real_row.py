"""kernel_args whose padding lanes read row 0 (a real request's) instead of the dummy row.

EXPECT: kv_indices
"""
from __future__ import annotations

import numpy as np
import torch

from minisgl_edu.attention.metadata import KernelArgs


def kernel_args(reqs, pool, padded_size: int = 0) -> KernelArgs:
    """Translate the ledgers of `reqs` (plus padding lanes up to `padded_size`) into kernel arguments.

    For B lanes (the requests, then max(0, padded_size - len(reqs)) padding lanes):
      cu_seqlens_q [B+1] int32: 0, then prefix sums of extend_len (a padding lane: 1 query token);
      cu_seqlens_k [B+1] int32: 0, then prefix sums of device_len (a padding lane: 1 key);
      seq_lens_k   [B]   int32: device_len per lane;
      kv_indices   [cu_seqlens_k[-1]] int32: for each lane, its page-table row's entries at positions
                   0 .. device_len-1 (a padding lane uses the dummy row, pool.dummy_row);
      last_page_len [B] int32: all ones (the kernel sees pages of one token);
      num_padding: the number of padding lanes."""
    pads = max(0, padded_size - len(reqs))
    rows = [r.table_idx for r in reqs] + [0] * pads
    ext = [r.extend_len for r in reqs] + [1] * pads
    kv_len = [r.device_len for r in reqs] + [1] * pads
    i32 = lambda a: torch.tensor(np.asarray(a, dtype=np.int32))
    kv = [pool.page_table[row, :n] for row, n in zip(rows, kv_len)]
    kv_indices = torch.cat(kv) if kv else torch.zeros(0, dtype=torch.int32)
    return KernelArgs(i32(np.concatenate([[0], np.cumsum(ext)])), i32(np.concatenate([[0], np.cumsum(kv_len)])),
                      i32(kv_len), kv_indices.to(torch.int32), i32(np.ones(len(rows))), pads)
