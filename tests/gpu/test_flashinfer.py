"""FlashInfer backend == reference backend (float32) on the same paged pool, for prefill,
extend-with-prefix and decode, two GQA head layouts and two page sizes.

Tolerance: relative error ||out - ref|| / ||ref|| < 1e-2 (bf16 operands; FlashInfer lands near 2e-3)."""
from __future__ import annotations

import pytest
import torch

from .gpu_helpers import report
from minisgl_edu.attention.flashinfer import FlashInferBackend
from minisgl_edu.attention.reference import ReferenceBackend
from minisgl_edu.paging import KVCache, PagePool
from minisgl_edu.req import Batch, Req, SamplingParams

TOL = 1e-2
LAYERS = 2


def rel_err(out, ref) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("q_heads,kv_heads,head_dim", [(9, 3, 64), (16, 8, 128)])
def test_flashinfer_matches_reference(q_heads, kv_heads, head_dim, page_size):
    dev = torch.device("cuda")
    torch.manual_seed(q_heads * 100 + page_size)
    num_pages = 8192 // page_size
    kv16 = KVCache(LAYERS, num_pages, page_size, kv_heads, head_dim, torch.bfloat16, dev)
    kv32 = KVCache(LAYERS, num_pages, page_size, kv_heads, head_dim, torch.float32, dev)
    pool = PagePool(num_pages, page_size, 16, 4096, dev)
    fi, ref = FlashInferBackend(kv16, pool, num_q_heads=q_heads), ReferenceBackend(kv32, pool)
    pool.free_pages = pool.free_pages[torch.randperm(num_pages, device=dev)]  # scattered pages

    def step(reqs, phase, name):
        batch = Batch(reqs, phase)
        batch.out_loc = pool.assign_locations(reqs)
        n = sum(r.extend_len for r in reqs)
        fi.prepare(batch)
        md_fi = batch.attn_metadata
        ref.prepare(batch)
        md_ref = batch.attn_metadata
        for md in (md_fi, md_ref):  # both read kernel_args(): indices on the GPU, the planner's arrays pinned on the host
            assert md.args.kv_indices.is_cuda and md.args.kv_indices.dtype == torch.int32
            for t in (md.args.cu_seqlens_q, md.args.cu_seqlens_k, md.args.seq_lens_k, md.args.last_page_len):
                assert t.device.type == "cpu" and t.is_pinned() and t.dtype == torch.int32
        for layer in range(LAYERS):
            q = torch.randn(n, q_heads, head_dim, device=dev).bfloat16()
            k = torch.randn(n, kv_heads, head_dim, device=dev).bfloat16()
            v = torch.randn(n, kv_heads, head_dim, device=dev).bfloat16()
            batch.attn_metadata = md_fi
            out = fi.forward(q, k, v, layer, batch)
            batch.attn_metadata = md_ref
            want = ref.forward(q.float(), k.float(), v.float(), layer, batch)
            err = rel_err(out, want)
            report(check="flashinfer_vs_reference", phase=name, heads=f"{q_heads}/{kv_heads}", head_dim=head_dim,
                   page_size=page_size, layer=layer, rel_err=err)
            assert err < TOL, (name, layer, err)
            for i, r in enumerate(reqs):  # per request too: one broken request cannot hide in the norm
                s, e = md_ref.spans[i][:2]  # its query rows, from cu_seqlens_q
                assert rel_err(out[s:e], want[s:e]) < TOL, (name, layer, i)

    lens = [1, 7, 33, 130, 300, 517]
    reqs = [Req(i, [0] * n, SamplingParams(max_tokens=64)) for i, n in enumerate(lens)]
    for r in reqs:  # prefill: the first half of each prompt, nothing cached
        r.table_idx, r.cached_len, r.device_len = pool.take_row(), 0, max(1, r.prompt_len // 2)
    step(reqs, "prefill", "prefill")
    for r in reqs:  # extend-with-prefix: the rest, attending to the cached first half
        r.cached_len, r.device_len = r.device_len, max(r.prompt_len, r.device_len + 1)
    step(reqs, "prefill", "extend")
    for _ in range(3):  # decode: one new token each, three steps
        for r in reqs:
            r.complete_one()
        step(reqs, "decode", "decode")
