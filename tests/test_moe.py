"""Chapter 10: Mistral and Qwen3-MoE against transformers, on the CPU in float32.

* tiny random Mistral and Qwen3-MoE checkpoints, written by transformers' own `save_pretrained`,
  give transformers' greedy tokens for a mixed batch with chunked prefill, a radix hit and page sizes
  1 and 4, on both MoE paths (reference and grouped);
* the router, the experts (both paths) and the sparse-layer rule equal transformers' modules;
* Qwen3-MoE at tp=2 (gloo) equals tp=1, and each rank holds a slice of every expert;
* a sliding window the context can reach is refused with a clear error;
* the expected-experts formula matches a simulation of uniform routing, and the MoE memory floor's
  byte counts match the built model (the tiny one and Qwen3-30B-A3B's shapes).
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from minisgl_edu import LLM, SamplingParams
from minisgl_edu.model import build_model, load_config
from minisgl_edu.model.moe import (ExpertGroups, expected_experts_read, experts_grouped, experts_reference, group_by_expert,
                                   is_sparse_layer, moe_impl, route)
from minisgl_edu.tp import set_tp_info
from tiny_model import one_thread  # noqa: F401 (fixture)

VOCAB, N = 251, 10
A3B = str(Path(__file__).resolve().parents[1] / "benchmarks" / "configs" / "qwen3-30b-a3b")


def save_tiny(path: str, kind: str, seed: int = 0, **over) -> str:
    """A randomly initialised transformers model from a small config, saved by transformers itself.
    initializer_range 0.1 (not 0.02) keeps logits and router scores far from ties."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, tie_word_embeddings=False, initializer_range=0.1)
    if kind == "mistral":
        cfg = MistralConfig(**{**common, "num_hidden_layers": 2, "sliding_window": 256, **over})
        model = MistralForCausalLM(cfg)
    else:  # layer 1 is dense (mlp_only_layers): both kinds of MLP in one model
        cfg = Qwen3MoeConfig(**{**common, "num_hidden_layers": 3, "head_dim": 16, "moe_intermediate_size": 32,
                                "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True,
                                "mlp_only_layers": [1], **over})
        model = Qwen3MoeForCausalLM(cfg)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return {k: save_tiny(str(tmp_path_factory.mktemp(k)), k) for k in ("mistral", "qwen3_moe")}


def waves() -> list[list[list[int]]]:
    """Wave 1: mixed lengths, most longer than the 16-token budget. Wave 2 shares wave 1's prefixes."""
    rng = random.Random(0)
    first = [[rng.randrange(VOCAB) for _ in range(n)] for n in (5, 40, 13, 70)]
    return [first, [first[3][:48] + [rng.randrange(VOCAB) for _ in range(6)], first[1] + [7, 8, 9]]]


@pytest.fixture(scope="module")
def hf_tokens(ckpts):
    """transformers' greedy continuation of every prompt, one prompt at a time."""
    from transformers import AutoModelForCausalLM
    out = {}
    for kind, path in ckpts.items():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        for prompt in (p for w in waves() for p in w):
            x = torch.tensor([prompt])
            with torch.no_grad():
                y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N, do_sample=False, pad_token_id=0)
            out[kind, tuple(prompt)] = y[0, len(prompt):].tolist()
    return out


@pytest.mark.parametrize("kind,page_size,impl", [("mistral", 1, "reference"), ("mistral", 4, "reference"),
                                                  ("qwen3_moe", 1, "reference"), ("qwen3_moe", 4, "reference"),
                                                  ("qwen3_moe", 1, "grouped"), ("qwen3_moe", 4, "grouped")])
def test_token_identical_to_transformers(kind, page_size, impl, ckpts, hf_tokens, one_thread):
    llm = LLM(ckpts[kind], device="cpu", page_size=page_size, max_prefill_tokens=16, moe_impl=impl)
    assert moe_impl(torch.zeros(1)) == impl, "the config field reached the layers"
    sp = SamplingParams(max_tokens=N, ignore_eos=True)
    stats = []
    for wave in waves():
        outs = llm.generate(wave, sp, use_tqdm=False)
        stats.append(list(llm.scheduler.stats))
        for prompt, out in zip(wave, outs):
            assert out["token_ids"] == hf_tokens[kind, tuple(prompt)]
    first = stats[0]
    assert sum(s.phase == "prefill" for s in first) > len(waves()[0]), "long prompts were chunked"
    hits = sum(s.cache_hit_tokens for s in stats[1][len(first):])
    assert hits >= 40, f"wave 2 reused wave 1's prefixes from the radix cache ({hits} tokens)"
    llm.scheduler.check_integrity()


def test_outputs_are_not_degenerate(hf_tokens):
    """A constant output would make the oracle test too easy to pass."""
    for kind in ("mistral", "qwen3_moe"):
        seqs = [v for (k, _), v in hf_tokens.items() if k == kind]
        assert len({t for s in seqs for t in s}) >= 10, seqs
        assert len({tuple(s) for s in seqs}) == len(seqs)


@pytest.mark.parametrize("norm", [True, False])
def test_router_and_experts_equal_transformers_modules(norm):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts, Qwen3MoeTopKRouter
    cfg = Qwen3MoeConfig(hidden_size=32, moe_intermediate_size=16, num_experts=6, num_experts_per_tok=3, norm_topk_prob=norm)
    torch.manual_seed(1)
    router, experts = Qwen3MoeTopKRouter(cfg), Qwen3MoeExperts(cfg)
    experts.config._experts_implementation = "eager"  # transformers' own loop, not its grouped kernel
    for p in (router.weight, experts.gate_up_proj, experts.down_proj):
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(40, 32)
    with torch.no_grad():
        _, hf_w, hf_e = router(x)
        routing = route(torch.nn.functional.linear(x, router.weight), 3, norm)
        assert torch.equal(routing.experts, hf_e)
        torch.testing.assert_close(routing.weights, hf_w)
        if norm:
            torch.testing.assert_close(routing.weights.sum(-1), torch.ones(40))
        hf_y = experts(x, hf_e, hf_w)
        for run in (experts_reference, experts_grouped):
            torch.testing.assert_close(run(x, routing, experts.gate_up_proj, experts.down_proj), hf_y, rtol=1e-5, atol=1e-6)


def test_group_by_expert_makes_contiguous_groups():
    experts = torch.tensor([[2, 0], [2, 1], [0, 2], [3, 2]])  # 4 tokens, top-2 of 5 experts (expert 4 unused)
    g = group_by_expert(experts, 5)
    assert g.counts.tolist() == [2, 1, 4, 1, 0]
    assert g.ends.tolist() == [2, 3, 7, 8, 8]
    assert experts.reshape(-1)[g.order].tolist() == [0, 0, 1, 2, 2, 2, 2, 3]
    assert g.token.tolist() == [0, 2, 1, 0, 1, 2, 3, 3]  # inside a group, tokens keep batch order


def unsorted_groups(experts, num_experts):
    """Wrong: the right group sizes, but the rows left in batch order (not sorted by expert)."""
    g = group_by_expert(experts, num_experts)
    order = torch.arange(experts.numel())
    return ExpertGroups(order, order // experts.shape[-1], g.counts, g.ends)


def wrong_token_groups(experts, num_experts):
    """Wrong: sorted, but each row reads token `pair % top_k` instead of `pair // top_k`."""
    g = group_by_expert(experts, num_experts)
    return ExpertGroups(g.order, g.order % experts.shape[-1], g.counts, g.ends)


@pytest.mark.parametrize("aligned", [True, False])
def test_grouped_path_equals_reference_and_catches_wrong_groupings(aligned):
    """Aligned shapes run torch's grouped GEMM, unaligned ones its per-expert fallback; a wrong grouping fails."""
    torch.manual_seed(2)
    inter = 8 if aligned else 6
    x, gate_up, down = torch.randn(12, 8), torch.randn(4, 2 * inter, 8), torch.randn(4, 8, inter)
    routing = route(torch.randn(12, 4), 2, True)
    good = experts_reference(x, routing, gate_up, down)
    torch.testing.assert_close(experts_grouped(x, routing, gate_up, down), good)
    for wrong in (unsorted_groups, wrong_token_groups):
        assert not torch.allclose(experts_grouped(x, routing, gate_up, down, group=wrong), good, atol=1e-3)


@pytest.mark.parametrize("over", [dict(decoder_sparse_step=2), dict(decoder_sparse_step=1, mlp_only_layers=[0, 3]),
                                  dict(decoder_sparse_step=3, mlp_only_layers=[2])])
def test_sparse_layers_follow_transformers(over):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeDecoderLayer, Qwen3MoeSparseMoeBlock
    cfg = Qwen3MoeConfig(hidden_size=16, intermediate_size=16, moe_intermediate_size=8, num_hidden_layers=6,
                         num_attention_heads=2, num_key_value_heads=1, num_experts=4, num_experts_per_tok=2, **over)
    hf = [isinstance(Qwen3MoeDecoderLayer(cfg, i).mlp, Qwen3MoeSparseMoeBlock) for i in range(6)]
    assert [is_sparse_layer(cfg, i) for i in range(6)] == hf
    assert 0 < sum(hf) < 6


def test_tp2_equals_tp1_and_shards_every_expert(ckpts, one_thread):
    path = ckpts["qwen3_moe"]
    sp = SamplingParams(max_tokens=N, ignore_eos=True)
    ref = LLM(path, device="cpu", page_size=2, max_prefill_tokens=16)
    expected = [[o["token_ids"] for o in ref.generate(w, sp, use_tqdm=False)] for w in waves()]
    llm = LLM(path, device="cpu", tp=2, page_size=2, max_prefill_tokens=16)
    try:
        llm.ranks.record()
        got = [[o["token_ids"] for o in llm.generate(w, sp, use_tqdm=False)] for w in waves()]
        reports = llm.ranks.reports()
    finally:
        llm.close()
    assert got == expected
    assert all(r.shard_shapes["layers.0.mlp.experts.gate_up_proj"] == (8, 2 * 16, 64) for r in reports)
    assert all(r.shard_shapes["layers.0.mlp.experts.down_proj"] == (8, 64, 16) for r in reports)
    assert all(r.records == reports[0].records for r in reports) and reports[0].records


def test_expert_shards_are_slices_of_the_checkpoint(ckpts):
    from safetensors import safe_open
    path = ckpts["qwen3_moe"]
    cfg = load_config(path)
    with safe_open(f"{path}/model.safetensors", "pt") as st:
        gate, up, down = (st.get_tensor(f"model.layers.2.mlp.experts.5.{n}_proj.weight") for n in ("gate", "up", "down"))
    try:
        for rank in range(2):
            set_tp_info(rank, 2)
            model = build_model(cfg, torch.device("cpu"), torch.float32, 64, path)
            moe = model.layers[2].mlp.experts
            rows = slice(16 * rank, 16 * rank + 16)
            assert torch.equal(moe.gate_up_proj[5], torch.cat([gate[rows], up[rows]]))
            assert torch.equal(moe.down_proj[5], down[:, rows])
    finally:
        set_tp_info(0, 1)


def test_fused_expert_tensors_load_too(ckpts, tmp_path):
    """A checkpoint storing transformers 5's in-memory layout (experts.gate_up_proj [E, 2I, H]) loads the same."""
    import shutil

    from safetensors.torch import load_file, save_file
    src = ckpts["qwen3_moe"]
    tensors = load_file(f"{src}/model.safetensors")
    fused = {k: v for k, v in tensors.items() if ".experts." not in k}
    for layer in (0, 2):
        p = f"model.layers.{layer}.mlp.experts"
        get = lambda e, n: tensors[f"{p}.{e}.{n}_proj.weight"]
        fused[f"{p}.gate_up_proj"] = torch.stack([torch.cat([get(e, "gate"), get(e, "up")]) for e in range(8)])
        fused[f"{p}.down_proj"] = torch.stack([get(e, "down") for e in range(8)])
    save_file(fused, str(tmp_path / "model.safetensors"))
    shutil.copy(f"{src}/config.json", tmp_path)
    cfg = load_config(src)
    a = build_model(cfg, torch.device("cpu"), torch.float32, 64, src).state_dict()
    b = build_model(cfg, torch.device("cpu"), torch.float32, 64, str(tmp_path)).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_missing_expert_matrix_is_refused(ckpts, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file
    src = ckpts["qwen3_moe"]
    tensors = load_file(f"{src}/model.safetensors")
    del tensors["model.layers.2.mlp.experts.6.up_proj.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    shutil.copy(f"{src}/config.json", tmp_path)
    with pytest.raises(KeyError, match=r"layers.2.mlp.experts.gate_up_proj \(15 of 16 expert matrices\)"):
        build_model(load_config(src), torch.device("cpu"), torch.float32, 64, str(tmp_path))


def test_an_unknown_moe_impl_is_refused(ckpts):
    with pytest.raises(ValueError, match="moe_impl must be 'reference' or 'grouped', got 'fast'"):
        LLM(ckpts["qwen3_moe"], device="cpu", moe_impl="fast")


def test_sliding_window_the_context_reaches_is_refused(tmp_path, one_thread):
    path = save_tiny(str(tmp_path), "mistral", sliding_window=64)
    with pytest.raises(ValueError, match=r"sliding_window=64, smaller than the context length 256.*max_seq_len <= 64"):
        LLM(path, device="cpu")
    llm = LLM(path, device="cpu", max_seq_len=64)  # the window is never reached: served exactly
    assert llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)[0]["token_ids"]


def test_expected_experts_matches_uniform_routing():
    g = torch.Generator().manual_seed(0)
    for b in (1, 4, 32, 256):
        seen = [len(torch.unique(torch.rand(b, 128, generator=g).topk(8, -1).indices)) for _ in range(50)]
        assert abs(sum(seen) / 50 - expected_experts_read(b, 128, 8)) < 1.5, (b, sum(seen) / 50)
    assert expected_experts_read(1, 128, 8) == pytest.approx(8)
    assert expected_experts_read(256, 128, 8) > 127  # a large decode batch reads nearly every expert


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_moe_bytes_from_config_equals_the_built_model(ckpts, tp):
    """The floor's byte counts from a config alone equal the parameters of the model built from it."""
    from minisgl_edu.model.moe import Qwen3MoeForCausalLM, moe_bytes, moe_bytes_from_config
    for cfg in (load_config(ckpts["qwen3_moe"]), load_config(A3B)):
        try:
            set_tp_info(0, tp)
            with torch.device("meta"):  # shapes only: the 30B model needs no memory
                model = Qwen3MoeForCausalLM(cfg, 64)
        finally:
            set_tp_info(0, 1)
        assert moe_bytes(model) == moe_bytes_from_config(cfg, bytes_per_param=4, tp=tp)
    wb = moe_bytes_from_config(load_config(A3B))
    assert (wb.sparse_layers, wb.num_experts, wb.top_k) == (48, 128, 8)
    assert 60e9 < wb.total < 62e9 and wb.per_expert == 3 * 2048 * 768 * 2  # ~61 GB in bf16


def test_moe_floor_is_the_dense_floor_when_every_expert_is_read():
    from dataclasses import replace

    from minisgl_edu.bench import decode_floor_s
    from minisgl_edu.model.moe import MoeBytes, moe_decode_floor_s
    prompts, outputs = [100, 300, 50], [5, 9, 2]
    wb = MoeBytes(dense=1000, per_expert=10, sparse_layers=3, num_experts=4, top_k=2)
    everything = replace(wb, top_k=4)  # k = E: every token reads every expert
    assert moe_decode_floor_s(prompts, outputs, everything, 7, 1e3) == pytest.approx(decode_floor_s(prompts, outputs, wb.total, 7, 1e3))
    assert moe_decode_floor_s(prompts, outputs, wb, 7, 1e3) < decode_floor_s(prompts, outputs, wb.total, 7, 1e3)
    measured_all = moe_decode_floor_s(prompts, outputs, wb, 7, 1e3, experts_read=lambda b: 4)  # a measured count
    assert measured_all == pytest.approx(decode_floor_s(prompts, outputs, wb.total, 7, 1e3))


def test_active_params_count_top_k_experts_only(ckpts):
    """The default mixed budget (scheduler.mixed_tokens_for) weighs a token's work by the parameters it meets: of each
    sparse layer's experts only top_k of num_experts; counted in full, Qwen3-30B-A3B's budget would shrink tenfold."""
    from minisgl_edu import LLM
    from minisgl_edu.model.moe import SparseMoeBlock
    from minisgl_edu.scheduler import active_params
    model = LLM(ckpts["qwen3_moe"], device="cpu").engine.model
    dense = sum(p.numel() for n, p in model.named_parameters()
                if "experts" not in n and "embed" not in n and "lm_head" not in n)
    blocks = [m for m in model.modules() if isinstance(m, SparseMoeBlock)]
    experts = [sum(p.numel() for p in b.experts.parameters()) for b in blocks]
    assert len(blocks) == 2 and all(b.top_k == 2 for b in blocks)  # 8 experts, top 2, in layers 0 and 2
    want = dense + sum(e * 2 // 8 for e in experts)
    assert active_params(model) == want
    every_expert = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)
    assert every_expert != want  # the wrong count (session 12's rule: every expert) is told apart

