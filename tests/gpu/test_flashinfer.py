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


@pytest.mark.parametrize("page_size,pages", [(1, False), (16, False), (16, True)])  # pages: FlashInfer reads pages
@pytest.mark.parametrize("q_heads,kv_heads,head_dim", [(9, 3, 64), (16, 8, 128)])
def test_flashinfer_matches_reference(q_heads, kv_heads, head_dim, page_size, pages, monkeypatch):
    import minisgl_edu.attention.flashinfer as fib
    monkeypatch.setattr(fib, "PAGES", pages)
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


def test_kv_indices_kernel_equals_the_torch_gather(monkeypatch):
    """kernel_args' slots from our one-launch kernel (model/kv_indices.cu) == the PyTorch gather, its twin
    (`--no-fused-kernels`), exactly: a prefill with a cached prefix, a decode batch, padding lanes, a slack lane.
    The wrong launch kept at the end (the rows read from the buffer's last_page_len slice) is caught."""
    from minisgl_edu.attention import metadata
    from minisgl_edu.attention.metadata import kernel_args
    from minisgl_edu.exercises.swap import patched
    from minisgl_edu.model import qk_kernel
    from minisgl_edu.model.layers import KERNELS
    dev = torch.device("cuda")
    pool = PagePool(4096, 1, 16, 2048, dev)
    pool.free_pages = pool.free_pages[torch.randperm(4096, device=dev)]  # scattered slots
    g = torch.Generator().manual_seed(3)
    reqs = []
    for i, n in enumerate(torch.randint(1, 600, (9,), generator=g).tolist()):
        r = Req(i, list(range(n)), SamplingParams(max_tokens=4))
        r.table_idx, r.cached_len, r.device_len = pool.take_row(), n // 3, n
        pool.assign_locations([r])
        reqs.append(r)
    for r in reqs[2:]:
        r.cached_len = r.device_len - 1  # one new token each: decode rows
    shapes = {"two prompts over a cached prefix, 7 decode rows": (reqs, {}),
              "decode rows padded to 16": (reqs[2:], dict(padded_size=16)),
              "two prompts + the slack lane": (reqs[:2], dict(padded_size=4, padded_tokens=1024))}
    assert qk_kernel.kv_indices(pool.page_table, torch.zeros(0, dtype=torch.int32, device=dev),
                                torch.zeros(1, dtype=torch.int32, device=dev), 0) is not None, "no kv_indices cubin"
    try:
        for name, (rs, kw) in shapes.items():
            KERNELS.fused = True
            ours = kernel_args(rs, pool, **kw)
            KERNELS.fused = False
            twin = kernel_args(rs, pool, **kw)
            report(check="kv_indices_kernel_vs_torch", shape=name, indices=len(ours.kv_indices))
            assert ours.kv_indices.dtype == twin.kv_indices.dtype == torch.int32
            assert torch.equal(ours.kv_indices, twin.kv_indices), name
            assert torch.equal(ours.cu_seqlens_k, twin.cu_seqlens_k)
            assert torch.equal(ours.last_page_len, twin.last_page_len)
        KERNELS.fused = False
        right = kernel_args(reqs[2:], pool, padded_size=16).kv_indices  # the twin's slots for the padded decode rows
        KERNELS.fused = True
        monkeypatch.setattr(metadata, "gather_slots",
                            patched("minisgl_edu.attention.metadata:gather_slots", ("meta[4 * b + 2:]", "meta[3 * b + 2:]")))
        wrong = kernel_args(reqs[2:], pool, padded_size=16).kv_indices
        report(check="kv_indices_kernel_mutant_caught", shape="rows read from the last_page_len slice")
        assert wrong.shape == right.shape and not torch.equal(wrong, right)
    finally:
        KERNELS.fused = True
