"""Chapter 8: tensor parallelism on the CPU (gloo). One ledger, many ranks:

* tp=2 and tp=4 give the same greedy tokens as tp=1 (logits within float32 summation-order noise),
  on a mixed workload with chunked prefill and radix hits; sampled tokens agree on every rank;
* every rank forms the same batch every step (uids, ledger lengths, KV slots, tokens);
* shards are slices of the one model, whether loaded from a checkpoint or drawn at random;
* a bad head count is refused before any process starts; a dead rank raises, never hangs;
* a script without a `__main__` guard gets one sentence saying what to add, within seconds.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
import torch

from minisgl_edu import LLM, SamplingParams
from minisgl_edu.model import build_model, load_config
from minisgl_edu.model.llama import head_layout
from minisgl_edu.llm import RankFailed
from minisgl_edu.server.scheduler_proc import BatchRecorder
from minisgl_edu.tp import DistributedInfo, set_tp_info

VOCAB = 250  # not a multiple of 4: the last vocabulary shard at tp=4 is padded


def random_checkpoint(path: str, heads: int = 8, kv_heads: int = 4, seed: int = 0) -> str:
    """A small Llama checkpoint with random weights, written as Hugging Face names in safetensors,
    with std large enough that the logits are far from ties (so greedy tokens are a fair test)."""
    from safetensors.torch import save_file
    from transformers import LlamaConfig
    hidden, inter, layers, d = heads * 8, 128, 2, 8
    LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=d, max_position_embeddings=512,
                tie_word_embeddings=False).save_pretrained(path)
    g = torch.Generator().manual_seed(seed)
    w = lambda *s: torch.randn(*s, generator=g) / s[-1] ** 0.5 * 1.5
    norm = lambda n: 1 + 0.1 * torch.randn(n, generator=g)
    t = {"model.embed_tokens.weight": torch.randn(VOCAB, hidden, generator=g), "model.norm.weight": norm(hidden),
         "lm_head.weight": w(VOCAB, hidden) * 4}
    for i in range(layers):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": w(heads * d, hidden), p + "self_attn.k_proj.weight": w(kv_heads * d, hidden),
                  p + "self_attn.v_proj.weight": w(kv_heads * d, hidden), p + "self_attn.o_proj.weight": w(hidden, heads * d),
                  p + "mlp.gate_proj.weight": w(inter, hidden), p + "mlp.up_proj.weight": w(inter, hidden),
                  p + "mlp.down_proj.weight": w(hidden, inter), p + "input_layernorm.weight": norm(hidden),
                  p + "post_attention_layernorm.weight": norm(hidden)})
    save_file(t, os.path.join(path, "model.safetensors"))
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> str:
    return random_checkpoint(str(tmp_path_factory.mktemp("tp-llama")))


def waves() -> list[tuple[list[list[int]], SamplingParams]]:
    """Wave 1: mixed lengths, longer than the 16-token budget (chunked). Wave 2: shares wave 1's
    prefixes (radix hits). Wave 3: sampled at temperature > 0 with the engine's generator."""
    rng = random.Random(0)
    first = [[rng.randrange(VOCAB) for _ in range(n)] for n in (5, 40, 13, 70)]
    second = [first[3][:48] + [rng.randrange(VOCAB) for _ in range(6)], first[1] + [7, 8, 9]]
    greedy = SamplingParams(max_tokens=10, ignore_eos=True)
    return [(first, greedy), (second, greedy), (first[:3], SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True))]


@dataclass
class Run:
    tokens: list[list[list[int]]]  # [wave][prompt] -> generated ids (rank 0's)
    records: list[list[list]]  # [wave][rank] -> BatchRecords
    logits: list[list[torch.Tensor]]  # [wave] -> rank 0's logits per step
    llm: LLM


def run_waves(path: str, tp: int) -> Run:
    llm = LLM(path, device="cpu", tp=tp, page_size=2, max_prefill_tokens=16, max_total_tokens=2048)
    recorder = BatchRecorder(llm.engine, keep_logits=True) if tp == 1 else llm.ranks.record(logits=True)
    run = Run([], [], [], llm)
    for prompts, sp in waves():
        run.tokens.append([o["token_ids"] for o in llm.generate(prompts, sp, use_tqdm=False)])
        if tp == 1:
            records, logits = recorder.take()
            run.records.append([records])
        else:
            reports = llm.ranks.reports()
            run.records.append([r.records for r in reports])
            logits = reports[0].logits
        run.logits.append(logits)
    return run


@pytest.fixture(scope="module")
def runs(ckpt):
    out = {tp: run_waves(ckpt, tp) for tp in (1, 2, 4)}
    yield out
    for r in out.values():
        r.llm.close()


def test_workload_chunks_and_hits_the_radix_cache(runs):
    first, second = runs[1].records[0][0], runs[1].records[1][0]
    prefill_uids = [u for r in first if r.phase == "prefill" for u in r.uids]
    assert len(prefill_uids) > len(set(prefill_uids)), "some prompt was split over several prefill steps"
    assert max(sum(r.extend_lens) for r in first if r.phase == "prefill") <= 16
    uid = min(u for r in second for u in r.uids)  # wave 2's first prompt: wave 1's 4th prompt's first 48 tokens + 6
    first_step = next(r for r in second if uid in r.uids)
    assert first_step.cached_lens[first_step.uids.index(uid)] >= 46, "it starts from wave 1's cached prefix"


@pytest.mark.parametrize("tp", [2, 4])
def test_greedy_tokens_equal_tp1(runs, tp):
    for wave in (0, 1):
        assert runs[tp].tokens[wave] == runs[1].tokens[wave]
        assert all(len(t) == 10 for t in runs[tp].tokens[wave])


@pytest.mark.parametrize("tp", [2, 4])
def test_logits_close_to_tp1_and_far_from_ties(runs, tp):
    for wave in (0, 1):
        ref, got = runs[1].logits[wave], runs[tp].logits[wave]
        assert len(ref) == len(got) > 0
        for a, b in zip(ref, got):
            diff = (a - b).abs().max().item()
            assert diff < 1e-4, diff  # float32; only the all-reduce's summation order differs
            top2 = a.topk(2, dim=-1).values
            assert (top2[:, 0] - top2[:, 1]).min().item() > 100 * diff  # no near-tie could flip a token


@pytest.mark.parametrize("tp", [2, 4])
def test_every_rank_forms_the_same_batch_every_step(runs, tp):
    for wave, ranks in enumerate(runs[tp].records):
        assert len(ranks) == tp and len(ranks[0]) > 0
        for r in ranks[1:]:
            assert r == ranks[0]  # phase, uids, cached/extend lengths, KV slots (out_loc), sampled tokens
        if wave < 2:  # greedy: even the KV slots are those tp=1 chose
            assert ranks[0] == runs[1].records[wave][0]


@pytest.mark.parametrize("tp", [2, 4])
def test_sampling_agrees_on_every_rank(runs, tp):
    """Every rank samples from the same all-gathered logits with the same generator seed."""
    ranks = runs[tp].records[2]
    tokens = [[t for rec in r for t in rec.tokens] for r in ranks]
    assert all(t == tokens[0] for t in tokens)
    greedy = [l.argmax(-1).tolist() for l in runs[tp].logits[2]]
    assert tokens[0] != [t for g in greedy for t in g], "temperature 1.0 sampled something else than argmax"
    assert runs[tp].tokens[2] == runs[1].tokens[2]  # and the same as tp=1: same seed, same logits


def test_shards_are_slices_of_one_model(ckpt):
    """Loaded (safetensors slices) or drawn at random: rank r's shard is rows/columns of the full model."""
    cfg = load_config(ckpt)
    for dummy in (False, True):
        set_tp_info(0, 1)
        full = dict(build_model(cfg, torch.device("cpu"), torch.float32, 64, ckpt, dummy).named_parameters())
        try:
            for rank in range(4):
                set_tp_info(rank, 4)
                part = dict(build_model(cfg, torch.device("cpu"), torch.float32, 64, ckpt, dummy).named_parameters())
                qkv, fq = part["layers.0.self_attn.qkv_proj.weight"], full["layers.0.self_attn.qkv_proj.weight"]
                # 8 q heads, 4 kv heads, head_dim 8: rank r has q heads 2r, 2r+1 and kv head r
                assert torch.equal(qkv[:16], fq[16 * rank:16 * rank + 16])
                assert torch.equal(qkv[16:24], fq[64 + 8 * rank:64 + 8 * rank + 8])
                assert torch.equal(qkv[24:], fq[96 + 8 * rank:96 + 8 * rank + 8])
                o, fo = part["layers.0.self_attn.o_proj.weight"], full["layers.0.self_attn.o_proj.weight"]
                assert torch.equal(o, fo[:, 16 * rank:16 * rank + 16])
                gu, fgu = part["layers.0.mlp.gate_up_proj.weight"], full["layers.0.mlp.gate_up_proj.weight"]
                assert torch.equal(gu, torch.cat([fgu[32 * rank:32 * rank + 32], fgu[128 + 32 * rank:160 + 32 * rank]]))
                emb = part["embed_tokens.weight"]  # 250 = 63 + 63 + 63 + 61 (+ 2 zero rows)
                n = min(63, VOCAB - 63 * rank)
                assert emb.shape[0] == 63 and torch.equal(emb[:n], full["embed_tokens.weight"][63 * rank:63 * rank + n])
                assert not emb[n:].any()
        finally:
            set_tp_info(0, 1)


def test_head_layout_splits_or_replicates_kv_heads():
    lay = lambda h, kv, r, n: head_layout(h, kv, DistributedInfo(r, n))
    assert [lay(8, 4, r, 2) for r in range(2)] == [(4, 0, 2, 0), (4, 4, 2, 2)]
    # tp=4 > 2 KV heads: each KV head is kept by two ranks, the ones whose q heads use it
    assert [lay(16, 2, r, 4) for r in range(4)] == [(4, 0, 1, 0), (4, 4, 1, 0), (4, 8, 1, 1), (4, 12, 1, 1)]


def test_bad_head_count_is_refused_before_any_process_starts(tmp_path):
    path = random_checkpoint(str(tmp_path), heads=6, kv_heads=2)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"tp=4 does not divide the model's 6 query heads"):
        LLM(path, device="cpu", tp=4)
    assert time.monotonic() - t0 < 30  # refused in this process, no rank was spawned
    with pytest.raises(ValueError, match=r"tp=4 does not divide the model's 6 query heads"):
        head_layout(6, 2, DistributedInfo(0, 4))


def test_kv_heads_replicated_when_tp_exceeds_them(tmp_path):
    """2 KV heads over 4 ranks: ranks 0, 1 keep KV head 0 and ranks 2, 3 KV head 1, for their q heads."""
    path = random_checkpoint(str(tmp_path), heads=8, kv_heads=2, seed=1)
    prompts, sp = waves()[0]
    ref = LLM(path, device="cpu", page_size=2, max_prefill_tokens=16)
    rec = BatchRecorder(ref.engine, keep_logits=True)
    expected = [o["token_ids"] for o in ref.generate(prompts, sp, use_tqdm=False)]
    llm = LLM(path, device="cpu", tp=4, page_size=2, max_prefill_tokens=16)
    try:
        llm.ranks.record(logits=True)
        assert [o["token_ids"] for o in llm.generate(prompts, sp, use_tqdm=False)] == expected
        reports = llm.ranks.reports()
    finally:
        llm.close()
    assert all(r.shard_shapes["layers.0.self_attn.qkv_proj.weight"] == ((2 + 1 + 1) * 8, 64) for r in reports)
    assert all(r.records == reports[0].records for r in reports)
    assert max((a - b).abs().max().item() for a, b in zip(rec.logits, reports[0].logits)) < 1e-4


def test_default_model_tp3_matches_tp1(model_path, prompts):
    """SmolLM2-135M: 9 query heads and 3 KV heads split over three ranks; tied embeddings."""
    short = [prompts[0], prompts[3][:40], prompts[6]]
    sp = SamplingParams(max_tokens=8)
    ref = [o["token_ids"] for o in LLM(model_path, device="cpu").generate(short, sp, use_tqdm=False)]
    llm = LLM(model_path, device="cpu", tp=3)
    try:
        llm.ranks.record()
        assert [o["token_ids"] for o in llm.generate(short, sp, use_tqdm=False)] == ref
        reports = llm.ranks.reports()
        assert reports[0].shard_shapes["layers.0.self_attn.qkv_proj.weight"] == ((3 + 1 + 1) * 64, 576)
        assert all(r.records == reports[0].records for r in reports) and reports[0].records
    finally:
        llm.close()
    assert all(p.exitcode == 0 for p in llm.ranks.procs), "every rank exited cleanly"


def test_script_without_main_guard_gets_one_sentence(ckpt, tmp_path):
    """The ranks are spawned: each imports the script again, and an unguarded LLM(tp=2) there would spawn
    again. The children leave at once; the parent says what to add, once."""
    script = tmp_path / "unguarded.py"
    script.write_text(f"from minisgl_edu import LLM\nllm = LLM({ckpt!r}, device='cpu', tp=2)\nprint('unreachable')\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    took = time.monotonic() - t0
    assert r.returncode != 0 and "unreachable" not in r.stdout
    assert r.stderr.count('if __name__ == "__main__":') == 1, r.stderr
    assert "bootstrapping" not in r.stderr and "Traceback" in r.stderr  # one error, not one per child
    assert r.stderr.strip().splitlines()[-1].startswith("minisgl_edu.llm.RankFailed: this script starts")
    assert took < 60, took


def test_dead_rank_raises_instead_of_hanging(runs):
    """Runs last: it kills a rank of the tp=2 group."""
    group = runs[2].llm.ranks
    os.kill(group.procs[1].pid, signal.SIGKILL)
    group.procs[1].join(timeout=10)
    t0 = time.monotonic()
    with pytest.raises(RankFailed, match="rank 1"):
        runs[2].llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4), use_tqdm=False)
    assert time.monotonic() - t0 < 15  # the failure is noticed within a poll, plus 2 s to gather the others
    assert not group.alive, "no rank outlives the failure"
