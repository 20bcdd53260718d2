"""Chapter 7 exercises — from the ledger to kernel arguments. Write the function, then grade it:

    python -m minisgl_edu.exercises check 07

`kernel_args` replaces `minisgl_edu.attention.metadata.kernel_args` where both attention backends call
it (`AttentionBackend.prepare`, attention/base.py). The grader compares your arrays with the library's
on random batches, then runs the real engine, whose reference backend reads nothing but your kernel
arguments (as FlashInfer does), with decode steps padded to a captured size: the tokens must be the
library's, and padding lanes must touch only the dummy page.
"""
from __future__ import annotations

import numpy as np
import torch

from minisgl_edu.attention.metadata import KernelArgs  # the dataclass you fill
from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)
from minisgl_edu.paging import PagePool
from minisgl_edu.req import Req


def kernel_args(reqs: list[Req], pool: PagePool, padded_size: int = 0, padded_tokens: int = 0) -> KernelArgs:
    """Translate the ledgers of `reqs` (plus padding lanes up to `padded_size`) into kernel arguments.

    For B lanes (the requests, then max(0, padded_size - len(reqs)) padding lanes):
      cu_seqlens_q [B+1] int32: 0, then prefix sums of extend_len (a padding lane: 1 query token);
      cu_seqlens_k [B+1] int32: 0, then prefix sums of device_len (a padding lane: 1 key);
      seq_lens_k   [B]   int32: device_len per lane;
      kv_indices   [cu_seqlens_k[-1]] int32: for each lane, its page-table row's entries at positions
                   0 .. device_len-1 (a padding lane uses the dummy row, pool.dummy_row);
      last_page_len [B] int32: all ones (the kernel sees pages of one token);
      num_padding: the number of padding lanes.
    With padded_tokens > 0 and at least one padding lane (a prefill graph, graphs.py), the last padding lane
    takes the slack: its query tokens and its keys grow by padded_tokens - (all lanes' query tokens), so the
    query tokens sum to exactly padded_tokens."""
    raise NotAttempted  # your code here
