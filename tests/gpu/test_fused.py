"""Issue 16: every fused kernel against its plain-PyTorch twin (bf16, fresh random inputs, poisoned outputs),
and the whole model fused vs plain vs a float32 run. Tolerances: one bf16 rounding of a unit-scale value is
2^-8 relative, so a kernel that rounds once where PyTorch rounds two or three times differs by <= 2e-2 of
the largest value (max abs) and <= 1e-2 relative in norm."""
from __future__ import annotations

import json
import pathlib
import shutil

import pytest
import torch

from .gpu_helpers import CONFIGS, report
from minisgl_edu.attention.flashinfer import side_by_side
from minisgl_edu.engine import Engine, EngineConfig
from minisgl_edu.model import layers
from minisgl_edu.model import qk_kernel
from minisgl_edu.paging import KVCache
from minisgl_edu.req import Batch, Req, SamplingParams
from transformers import Qwen3Config

BF16 = torch.bfloat16
REL = 1e-2  # ‖fused − plain‖ / ‖plain‖ for one kernel in bf16


def rel(a, b) -> float:
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


class Switch:
    """Fused kernels on or off (plain PyTorch on CUDA too) inside the block: EngineConfig's fused_kernels/qk_kernel."""

    def __init__(self, fused: bool, own: bool = True):
        self.fused, self.own = fused, own  # own=False: FlashInfer's kernels only, not ours (qk_kernel.py)

    def __enter__(self):
        self.saved = layers.KERNELS.fused, layers.KERNELS.qk
        layers.KERNELS.fused, layers.KERNELS.qk = self.fused, self.own

    def __exit__(self, *exc):
        layers.KERNELS.fused, layers.KERNELS.qk = self.saved


def test_fused_add_rmsnorm_matches_plain():
    norm = layers.RMSNorm(1024, 1e-6).cuda().to(BF16)
    norm.weight.data.normal_()
    x, res = torch.randn(37, 1024, device="cuda", dtype=BF16), torch.randn(37, 1024, device="cuda", dtype=BF16)
    with Switch(False):
        want_h, want_r = norm(x.clone(), res.clone())
        want_plain = norm(x.clone())
    with Switch(True):
        assert layers.fused_kernels(x) is not None
        h, r = norm(x.clone(), res.clone())
        plain = norm(x.clone())
    assert torch.equal(r, want_r)  # the add is exact in both: a bf16 sum rounded once
    report(check="fused_add_rmsnorm", rel_err=rel(h, want_h), rmsnorm_rel_err=rel(plain, want_plain))
    assert rel(h, want_h) < REL and rel(plain, want_plain) < REL


def qkv_buffer(n, qh, kvh, d):
    return torch.randn(n, (qh + 2 * kvh) * d, device="cuda", dtype=BF16)


def plain_attention_inputs(qkv, qh, kvh, d, positions, rope, qn, kn):
    with Switch(False):
        q, k, v = qkv.clone().split([qh * d, kvh * d, kvh * d], -1)
        q, k, v = (t.unflatten(-1, (-1, d)) for t in (q, k, v))
        if qn is not None:
            q, k = qn(q), kn(k)
        q, k = rope(positions, q, k)
    return q, k, v


def norms(d):
    qn, kn = layers.RMSNorm(d, 1e-6).cuda().to(BF16), layers.RMSNorm(d, 1e-6).cuda().to(BF16)
    qn.weight.data.normal_(1, 0.3)
    kn.weight.data.normal_(1, 0.3)
    return qn, kn


def test_qk_norm_and_rope_in_place_on_strided_views():
    n, qh, kvh, d = 29, 16, 8, 128
    rope = layers.RotaryEmbedding(Qwen3Config(head_dim=d, rope_theta=1e6), d, 8192).cuda()
    qn, kn = norms(d)
    qkv = qkv_buffer(n, qh, kvh, d)
    positions = torch.randint(0, 8192, (n,), device="cuda")
    want_q, want_k, want_v = plain_attention_inputs(qkv, qh, kvh, d, positions, rope, qn, kn)
    with Switch(True):
        q, k, v = (t.unflatten(-1, (-1, d)) for t in qkv.split([qh * d, kvh * d, kvh * d], -1))
        q, k = qn(q, inplace=True), kn(k, inplace=True)
        q, k = rope(positions, q, k)
    # the results live in the q|k|v buffer itself (no copies), so K sits right before V
    assert q.data_ptr() == qkv.data_ptr() and side_by_side(k, v) is not None
    report(check="qk_norm_rope_in_place", q_rel_err=rel(q, want_q), k_rel_err=rel(k, want_k))
    assert rel(q, want_q) < REL and rel(k, want_k) < REL and torch.equal(v, want_v)


def test_one_copy_kv_store_equals_two():
    kv1 = KVCache(2, 64, 1, 8, 128, BF16, torch.device("cuda"))
    kv2 = KVCache(2, 64, 1, 8, 128, BF16, torch.device("cuda"))
    kv1.kv.fill_(float("nan"))
    kv2.kv.fill_(float("nan"))
    qkv = qkv_buffer(13, 16, 8, 128)
    k, v = (t.unflatten(-1, (8, 128)) for t in qkv[:, 16 * 128:].split([1024, 1024], -1))
    loc = torch.randperm(64, device="cuda")[:13]
    kv1.store(1, loc, k, v)
    kv2.store_kv(1, loc, side_by_side(k, v))
    assert torch.equal(kv1.kv.nan_to_num(7.0), kv2.kv.nan_to_num(7.0))
    assert torch.equal(kv2.k[1][loc], k) and torch.equal(kv2.v[1][loc], v)
    assert side_by_side(k.clone(), v) is None  # not neighbours: the two-copy store serves


@pytest.mark.parametrize("qh,kvh,d,qk_norm", [(16, 8, 128, True), (9, 3, 64, False), (32, 8, 128, True)])
def test_one_launch_qk_kernel_matches_plain(qh, kvh, d, qk_norm):
    if not qk_kernel.available(torch.empty(1, device="cuda", dtype=BF16)):
        pytest.skip(f"no cubin at {qk_kernel.cubin_path()} (scripts/build_fi_extra_kernels.sh builds it)")
    n, slots = 41, 256
    rope = layers.RotaryEmbedding(Qwen3Config(head_dim=d, rope_theta=1e6), d, 8192).cuda()
    qn, kn = norms(d) if qk_norm else (None, None)
    qkv = qkv_buffer(n, qh, kvh, d)
    positions = torch.randint(0, 8192, (n,), device="cuda")
    loc = torch.randperm(slots, device="cuda")[:n]
    want_q, want_k, want_v = plain_attention_inputs(qkv, qh, kvh, d, positions, rope, qn, kn)
    kp = torch.full((slots, kvh, d), float("nan"), device="cuda", dtype=BF16)  # poisoned: every write shows
    vp = torch.full_like(kp, float("nan"))
    w = (qn.weight, kn.weight, qn.eps) if qk_norm else (None, None, 0.0)
    qk_kernel.qk_norm_rope_store(qkv, qh, kvh, d, positions, rope.cos_sin, *w, kp, vp, loc)
    torch.cuda.synchronize()
    q = qkv[:, : qh * d].unflatten(-1, (qh, d))
    report(check="qk_kernel", shape=[qh, kvh, d], qk_norm=qk_norm, q_rel_err=rel(q, want_q), k_rel_err=rel(kp[loc], want_k),
           q_max_abs=(q.float() - want_q.float()).abs().max().item())
    assert rel(q, want_q) < REL and rel(kp[loc], want_k) < REL
    assert torch.equal(vp[loc], want_v)  # V is copied, not computed
    untouched = torch.ones(slots, dtype=torch.bool, device="cuda")
    untouched[loc] = False
    assert kp[untouched].isnan().all() and vp[untouched].isnan().all()  # nothing written outside out_loc
    assert not kp[loc].isnan().any()


def small_config(tmp: pathlib.Path, name: str, layers_: int) -> str:
    dst = tmp / name
    shutil.copytree(CONFIGS / name, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["num_hidden_layers"] = layers_
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def run_logits(path: str, dtype, prompts, attention=None) -> torch.Tensor:
    """Logits of a prefill of `prompts` and of the decode step after it (eager), as float32."""
    eng = Engine(EngineConfig(model_path=path, device="cuda", dtype=dtype, dummy_weights=True, max_running_reqs=8,
                              max_total_tokens=8192, cuda_graph_max_bs=0, attention=attention))
    for name, p in eng.model.named_parameters():  # dummy norms are all ones: give them a shape to get wrong
        if name.endswith("norm.weight"):
            p.data.copy_(1 + 0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    reqs = [Req(i, p, SamplingParams(max_tokens=4)) for i, p in enumerate(prompts)]
    out = []
    with torch.inference_mode():
        for phase in ("prefill", "decode"):
            for r in reqs:
                if phase == "prefill":
                    r.table_idx, r.device_len = eng.pool.take_row(), r.prompt_len
                    eng.pool.token_pool[r.table_idx, : r.prompt_len] = torch.tensor(r.token_ids, dtype=torch.int32)
            batch = Batch(reqs, phase)
            batch.out_loc = eng.pool.assign_locations(reqs)
            last = eng.prepare(batch)
            h = eng.model(batch.input_ids, batch.positions, eng.backend, batch)
            out.append(eng.model.logits(h[torch.as_tensor(last, device="cuda")]).float().cpu())
            for r in reqs:  # the same next token in every run (greedy picks could differ between dtypes)
                eng.pool.token_pool[r.table_idx, r.device_len] = (r.token_ids[0] + r.device_len) % 10000
                r.complete_one()
    del eng
    torch.cuda.empty_cache()
    return torch.cat(out)


@pytest.mark.parametrize("name", ["qwen3-0.6b", "smollm2-135m"])
def test_model_fused_vs_plain_vs_float32(tmp_path, name):
    path = small_config(tmp_path, name, 4)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 10000, (int(n),), generator=g).tolist() for n in (7, 130, 411)]
    ref = run_logits(path, torch.float32, prompts, attention="reference")  # the float32 oracle on the GPU
    with Switch(False):
        plain = run_logits(path, BF16, prompts)
    with Switch(True, own=False):
        fused_fi = run_logits(path, BF16, prompts)
    with Switch(True):
        fused = run_logits(path, BF16, prompts)
    e_plain, e_fi, e_fused = rel(plain, ref), rel(fused_fi, ref), rel(fused, ref)
    report(check="model_fused_vs_plain", model=name, layers=4, plain_vs_f32=e_plain, flashinfer_fused_vs_f32=e_fi,
           fused_vs_f32=e_fused, fused_vs_plain=rel(fused, plain),
           top1_fused_eq_plain=(fused.argmax(-1) == plain.argmax(-1)).float().mean().item())
    # fused bf16 is as close to float32 as plain bf16 is (it rounds less often, not more)
    assert e_fused < 1.25 * e_plain + 2e-3 and e_fi < 1.25 * e_plain + 2e-3, (e_plain, e_fi, e_fused)
    assert rel(fused, plain) < 3e-2


@pytest.mark.parametrize("inter,hidden", [(3072, 1024), (1536, 576)])
def test_small_m_kernels_match_plain(inter, hidden):
    """Our SiLU-and-mul + down GEMM for 1..8 rows and our <= 8-row linear (the experiment behind KERNELS.small_m) against FlashInfer's
    silu_and_mul then F.linear; None for 9 rows (the plain pair serves)."""
    import torch.nn.functional as F
    if not qk_kernel.available(torch.zeros(1, device="cuda", dtype=BF16), "silu_mul_down"):
        pytest.skip("no silu_mul_down cubin (scripts/build_fi_extra_kernels.sh) or not sm_90")
    g = torch.Generator(device="cuda").manual_seed(inter)
    w = (torch.randn(hidden, inter, device="cuda", generator=g) / inter**0.5).to(BF16)
    with Switch(True):
        for m in (1, 2, 3, 8):
            gu = torch.randn(m, 2 * inter, device="cuda", generator=g).to(BF16)
            want = F.linear(layers.silu_and_mul(gu), w)
            got = qk_kernel.silu_mul_down(gu, w)
            assert got is not None and got.shape == want.shape and torch.isfinite(got).all()
            err = rel(got, want)
            report(check="silu_mul_down_vs_plain", inter=inter, hidden=hidden, rows=m, rel_err=err)
            assert err < REL, (m, err)
            wide = torch.randn(m, 2 * inter + 64, device="cuda", generator=g).to(BF16)[:, 64:]  # a strided view
            assert rel(qk_kernel.silu_mul_down(wide, w), F.linear(layers.silu_and_mul(wide.contiguous()), w)) < REL
            x = torch.randn(m, inter, device="cuda", generator=g).to(BF16)  # the plain product (o_proj's use)
            err = rel(qk_kernel.small_m_linear(x, w), F.linear(x, w))
            report(check="small_m_linear_vs_plain", k=inter, n=hidden, rows=m, rel_err=err)
            assert err < REL, (m, err)
        assert qk_kernel.silu_mul_down(torch.randn(9, 2 * inter, device="cuda").to(BF16), w) is None
        assert qk_kernel.small_m_linear(torch.randn(9, inter, device="cuda").to(BF16), w) is None


def test_small_m_kernels_in_the_model_match_plain(tmp_path):
    """The whole model with KERNELS.small_m on (o_proj and the MLP's tail through our kernels at <= 8 rows)
    against it off: the decode step's logits within the fused-vs-plain tolerance; top-1 equal on most rows."""
    if not qk_kernel.available(torch.zeros(1, device="cuda", dtype=BF16), "small_m_linear"):
        pytest.skip("no silu_mul_down cubin (scripts/build_fi_extra_kernels.sh) or not sm_90")
    path = small_config(tmp_path, "qwen3-0.6b", 4)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, 10000, (int(n),), generator=g).tolist() for n in (5, 70, 300)]
    with Switch(True):
        off = run_logits(path, BF16, prompts)
        layers.KERNELS.small_m = True
        try:
            on = run_logits(path, BF16, prompts)
        finally:
            layers.KERNELS.small_m = False
    dec_on, dec_off = on[-3:], off[-3:]  # the decode step's 3 rows went through our kernels (prefill did not)
    report(check="small_m_model", decode_rel=rel(dec_on, dec_off), prefill_rel=rel(on[:-3], off[:-3]))
    assert rel(on[:-3], off[:-3]) < 1e-3  # the prefill (> 8 rows) never takes them: the same kernels both times
    assert rel(dec_on, dec_off) < 3e-2
