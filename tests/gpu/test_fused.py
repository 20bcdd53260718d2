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
    k = layers.KERNELS  # the switches set around the call (Switch), handed on: the Engine applies its config's
    eng = Engine(EngineConfig(model_path=path, device="cuda", dtype=dtype, dummy_weights=True, max_running_reqs=8,
                              max_total_tokens=8192, cuda_graph_max_bs=0, attention=attention, fused_kernels=k.fused,
                              qk_kernel=k.qk, gemv_kernel=k.gemv, pdl=k.pdl,
                              skinny_gemm=k.skinny))
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
    assert 0 < rel(fused, plain) < 3e-2  # 0: a switch that did not switch
    if name == "qwen3-0.6b":  # without q/k norms (SmolLM2) our one-launch kernel gives FlashInfer's RoPE bit for bit
        assert rel(fused, fused_fi) > 0


def gemv_ready() -> bool:
    return qk_kernel.gemv_ready(torch.device("cuda"))


@pytest.mark.parametrize("k,n", [(3072, 1024), (2048, 1024), (1024, 4096), (1536, 576), (576, 960)])
def test_gemv_matches_plain(k, n):
    """Our one-row GEMV (gemv.cu) at every configuration it is built for, plain, with SiLU-and-mul riding along,
    and with the residual add + RMSNorm folded in, against F.linear after FlashInfer's silu_and_mul and
    fused_add_rmsnorm; a strided input row too. Two rows, a k no build covers, or a transposed weight: None."""
    import torch.nn.functional as F
    if not gemv_ready():
        pytest.skip("no gemv cubin (scripts/build_fi_extra_kernels.sh) or not sm_90")
    g = torch.Generator(device="cuda").manual_seed(k + n)
    w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(BF16)
    x = torch.randn(1, k, device="cuda", generator=g).to(BF16)
    gu = torch.randn(1, 2 * k + 64, device="cuda", generator=g).to(BF16)[:, 64:]  # a strided view of one row
    res = torch.randn(1, k, device="cuda", generator=g).to(BF16)
    norm = layers.RMSNorm(k, 1e-6).cuda().to(BF16)
    norm.weight.data = (1 + 0.3 * torch.randn(k, device="cuda", generator=g)).to(BF16)
    with Switch(True):
        want, want_silu = F.linear(x, w), F.linear(layers.silu_and_mul(gu.contiguous()), w)
        h, want_res = norm(x.clone(), res.clone())
        want_norm = F.linear(h, w)
        for cfg in qk_kernel.GEMV_BUILT:
            if qk_kernel.gemv_name("", k, *cfg) is None:
                assert qk_kernel.gemv(x, w, config=cfg) is None
                continue
            got, got_silu = qk_kernel.gemv(x, w, config=cfg), qk_kernel.gemv(gu, w, silu=True, config=cfg)
            before = res.clone()
            got_norm, got_res = qk_kernel.gemv(x, w, config=cfg, residual=res, norm_weight=norm.weight, eps=norm.eps)
            assert got.shape == want.shape and torch.isfinite(got).all() and torch.isfinite(got_silu).all()
            assert torch.equal(got_res, want_res) and torch.equal(res, before)  # x + res, rounded once; res untouched
            err, err_silu, err_norm = rel(got, want), rel(got_silu, want_silu), rel(got_norm, want_norm)
            report(check="gemv_vs_plain", k=k, n=n, config=list(cfg), rel_err=err, silu_rel_err=err_silu,
                   norm_rel_err=err_norm)
            assert err < REL and err_silu < REL and err_norm < REL, (cfg, err, err_silu, err_norm)
        assert qk_kernel.gemv(torch.randn(2, k, device="cuda").to(BF16), w) is None
        assert qk_kernel.gemv(x[:, 8:], w[:, 8:]) is None  # a weight whose rows are not contiguous
        assert qk_kernel.gemv(x, w, residual=res[:, :-8], norm_weight=norm.weight) is None  # a residual of the wrong size
        assert qk_kernel.gemv(torch.randn(1, 12, device="cuda").to(BF16), torch.randn(n, 12, device="cuda").to(BF16)) is None


def model_on_off(tmp_path, switch: str, prompts, rows: int, check: str) -> None:
    """The whole model (4 Qwen3 layers) with KERNELS.<switch> on against it off: the decode step's `rows` logits
    within the fused-vs-plain tolerance and not equal (else our kernel never ran); the prefill untouched."""
    path = small_config(tmp_path, "qwen3-0.6b", 4)
    saved = getattr(layers.KERNELS, switch)  # process-wide: an engine built earlier (another test's) may have set it
    with Switch(True):
        try:
            setattr(layers.KERNELS, switch, True)
            on = run_logits(path, BF16, prompts)
            setattr(layers.KERNELS, switch, False)
            off = run_logits(path, BF16, prompts)
        finally:
            setattr(layers.KERNELS, switch, saved)
    dec_on, dec_off = on[-rows:], off[-rows:]
    report(check=check, decode_rel=rel(dec_on, dec_off), prefill_rel=rel(on[:-rows], off[:-rows]))
    assert rel(on[:-rows], off[:-rows]) < 1e-3  # the prefill (many rows) never takes it: the same kernels both times
    assert 0 < rel(dec_on, dec_off) < 3e-2  # 0 would mean our kernel never ran


def test_gemv_in_the_model_matches_plain(tmp_path):
    """KERNELS.gemv (a one-row decode step's q|k|v and gate|up with their norms, and its MLP tail, through our GEMV)
    on against off, in the whole model."""
    if not gemv_ready():
        pytest.skip("no gemv cubin (scripts/build_fi_extra_kernels.sh) or not sm_90")
    g = torch.Generator().manual_seed(4)
    model_on_off(tmp_path, "gemv", [torch.randint(0, 10000, (300,), generator=g).tolist()], 1, "gemv_model")


def test_pdl_changes_when_not_what(tmp_path):
    """Programmatic dependent launch (KERNELS.pdl) changes when our GEMVs start, not what they compute: with it on,
    a one-row decode step's logits are bit for bit those of plain launches (eager), and greedy tokens through the
    batch-1 decode graph are the same. A GEMV that read its input before griddepcontrol.wait would race the kernel
    before it and fail the first or the second."""
    if not gemv_ready():
        pytest.skip("no gemv cubin (scripts/build_fi_extra_kernels.sh) or not sm_90")
    from minisgl_edu import LLM, SamplingParams
    path = small_config(tmp_path, "qwen3-0.6b", 4)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 10000, (n,), generator=g).tolist() for n in (300, 40)]
    saved = layers.KERNELS.gemv, layers.KERNELS.pdl
    runs, tokens = {}, {}
    with Switch(True):
        try:
            for pdl in (True, False):
                layers.KERNELS.gemv, layers.KERNELS.pdl = True, pdl
                runs[pdl] = run_logits(path, BF16, prompts[:1])
                llm = LLM(path, device="cuda", dummy_weights=True, cuda_graph_max_bs=4, max_total_tokens=8192, pdl=pdl)
                assert llm.engine.graphs is not None
                tokens[pdl] = [llm.generate([p], SamplingParams(max_tokens=48, ignore_eos=True), use_tqdm=False)[0]["token_ids"]
                               for p in prompts]  # one request at a time: every decode step is the one-row graph
                del llm
        finally:
            layers.KERNELS.gemv, layers.KERNELS.pdl = saved
    report(check="pdl_same", logits_equal=bool(torch.equal(runs[True], runs[False])), tokens_equal=tokens[True] == tokens[False])
    assert torch.equal(runs[True], runs[False])
    assert tokens[True] == tokens[False] and all(len(t) == 48 for t in tokens[True])


def skinny_ready() -> bool:
    return qk_kernel._kernel(torch.device("cuda"), "skinny_m1_n1_j32_w8") is not None


@pytest.mark.parametrize("ga", qk_kernel.SKINNY_GA_BUILT)
@pytest.mark.parametrize("k,n", [(1024, 4096), (1024, 6144), (3072, 1024), (2048, 1024), (1536, 576)])
def test_skinny_matches_plain(k, n, ga, monkeypatch):
    """Our tensor-core GEMM for 2-16 rows (skinny_gemm.cu) against cuBLAS and a float32 product: within one bf16
    rounding, bit-equal with PDL on and off and from one launch to the next (split-K summed in slice order), equal
    replayed in a CUDA graph with new inputs (the tickets are back at 0 after each launch); None for 1 and 17 rows
    and a column-major weight (then cuBLAS). ga: the model's shape (1, 1) and the probe's variants (session 36), x
    copied in groups and more accumulator chains, each held to the same."""
    if not skinny_ready():
        pytest.skip("no skinny_gemm cubin (scripts/build_fi_extra_kernels.sh) or not sm_90")
    monkeypatch.setattr(qk_kernel, "SKINNY_GA", ga)  # a plan a variant: SKINNY_GA is in the plans' key
    import torch.nn.functional as F
    g = torch.Generator(device="cuda").manual_seed(k + n)
    w = torch.randn(n, k, device="cuda", dtype=BF16, generator=g) * 0.03
    for m in (2, 7, 16):
        x = torch.randn(m, k, device="cuda", dtype=BF16, generator=g)
        ref = x.float() @ w.float().T
        y, again, plain = qk_kernel.skinny(x, w, pdl=True), qk_kernel.skinny(x, w, pdl=False), F.linear(x, w)
        report(check="skinny", k=k, n=n, m=m, ga=list(ga), rel=rel(y, ref), cublas_rel=rel(plain, ref))
        assert y is not None and torch.isfinite(y).all() and torch.equal(y, again)
        assert rel(y, ref) < REL and rel(y, plain) < REL
    for m in (1, 17):
        assert qk_kernel.skinny(torch.randn(m, k, device="cuda", dtype=BF16), w) is None
    assert qk_kernel.skinny(x, w.t().contiguous().t()) is None
    static_x, side = x.clone(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the capture stream's workspace exists before capture, as after the engine's warm-up
        qk_kernel.skinny(static_x, w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        static_y = qk_kernel.skinny(static_x, w)
    assert static_y is not None
    for _ in range(2):
        static_x.copy_(torch.randn(16, k, device="cuda", dtype=BF16, generator=g))
        graph.replay()
        assert torch.equal(static_y, qk_kernel.skinny(static_x, w))


def test_skinny_in_the_model_matches_plain(tmp_path):
    """KERNELS.skinny (a 4-request decode step's q|k|v, gate|up and down through our tensor-core GEMM) on against
    off (cuBLAS), in the whole model."""
    if not skinny_ready():
        pytest.skip("no skinny_gemm cubin (scripts/build_fi_extra_kernels.sh) or not sm_90")
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(0, 10000, (n,), generator=g).tolist() for n in (40, 90, 300, 17)]
    model_on_off(tmp_path, "skinny", prompts, 4, "skinny_model")
