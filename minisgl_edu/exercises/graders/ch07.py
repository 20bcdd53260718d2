"""Chapter 7: kernel_args — field by field against the library's on random batches, then the engine, whose
attention backend reads nothing but your kernel arguments (decode steps padded to captured sizes: padded_decode.py)."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import Wrong
from ..oracle import STANDARD_CASES, compare
from ..swap import swapped
from . import call, prop

HINTS = {
    "cu_seqlens_q": "0, then prefix sums of extend_len (1 per padding lane; with padded_tokens the last padding "
                    "lane takes the slack, so the last entry is padded_tokens)",
    "cu_seqlens_k": "0, then prefix sums of device_len (1 per padding lane, the slack lane 1 + the slack)",
    "seq_lens_k": "device_len per lane (1 per padding lane)",
    "kv_indices": "each lane's page-table row at positions 0..device_len-1; the dummy row for a padding lane",
    "last_page_len": "all ones: every page holds one token for the kernel",
    "num_padding": "padded_size - number of requests, or 0",
}

batches = st.tuples(st.sampled_from([1, 2, 4]), st.lists(st.tuples(st.integers(0, 20), st.integers(1, 9)),
                                                         min_size=0, max_size=4), st.integers(0, 8), st.integers(0, 12))


def grade_kernel_args(ex, path, module) -> None:
    import torch

    from ...attention.metadata import kernel_args as library
    from ...paging import PagePool
    from ...req import Req, SamplingParams

    def check(x):
        ps, ledgers, padded, slack = x
        pool = PagePool(128, ps, 4, 64, torch.device("cpu"))  # 4 requests of up to 29 tokens fit at page size 1
        reqs = []
        for i, (cached, ext) in enumerate(ledgers):
            r = Req(i, [1] * 40, SamplingParams(max_tokens=1))
            r.table_idx, r.device_len = pool.take_row(), cached + ext
            pool.assign_locations([r])
            r.cached_len = cached
            reqs.append(r)
        padded = padded if padded >= len(reqs) else 0
        # a prefill graph's token capacity: every lane's query tokens and `slack` more (only with a padding lane)
        tokens = sum(r.extend_len for r in reqs) + padded - len(reqs) + slack if slack and padded > len(reqs) else 0
        desc = (f"page_size {ps}, requests (cached_len, device_len) "
                f"{[(r.cached_len, r.device_len) for r in reqs]}, padded_size {padded}, padded_tokens {tokens}")
        want = library(reqs, pool, padded, tokens)
        got = call("kernel_args", module.kernel_args, reqs, pool, padded, tokens, on=desc)
        for name, hint in HINTS.items():
            a, b = getattr(got, name, None), getattr(want, name)
            a = a.tolist() if hasattr(a, "tolist") else a
            b = b.tolist() if hasattr(b, "tolist") else b
            if a != b:
                raise Wrong(f"{desc}: your {name} is {a}; it should be {b} ({hint})")

    prop(batches, check, 80, explicit=((4, [(5, 2), (0, 3)], 0, 0), (1, [(3, 1), (6, 1)], 4, 0),
                                       (1, [(0, 5)], 2, 7)))
    with swapped([ex], lambda e: path):
        for case in STANDARD_CASES[:2]:
            compare(case, "kernel_args")
