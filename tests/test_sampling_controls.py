"""Chapter 9 — the sampling controls and logprobs, checked against transformers on the CPU.

Unit level: `apply_controls` / `sample` on random logits against transformers' logits processors
(RepetitionPenalty, MinP, MinNewTokensLength, SequenceBias) and OpenAI's penalty formula.
Engine level: greedy decoding with a control through the real scheduler equals transformers'
`generate` with the same control on the default model; overlap on == off; logprobs equal
transformers' log-softmax within 1e-4.
"""
from __future__ import annotations

from collections import Counter

import pytest
import torch
from transformers import (MinNewTokensLengthLogitsProcessor, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                          SequenceBiasLogitsProcessor, TemperatureLogitsWarper)

from minisgl_edu import SamplingParams
from minisgl_edu.req import Req
from minisgl_edu.sampling import SamplingTensors, apply_controls, penalise, sample, token_logprobs
from tiny_model import one_thread, tiny_llm, tiny_model_dir  # noqa: F401 (fixture)

V = 50


def reqs_on_pool(seqs: list[list[int]], prompt_lens: list[int], params: list[SamplingParams]):
    """Requests whose tokens sit in a token pool as the engine would hold them mid-decode."""
    pool = torch.zeros(len(seqs) + 1, 64, dtype=torch.int32)
    reqs = []
    for i, (seq, n, sp) in enumerate(zip(seqs, prompt_lens, params)):
        r = Req(i, list(seq), sp, prompt_len=n)
        r.table_idx, r.device_len = i, len(seq)
        pool[i, :len(seq)] = torch.tensor(seq)
        reqs.append(r)
    return reqs, pool


def random_case(seed: int, **kw):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, 12, (n,), generator=g).tolist() for n in (7, 12, 3)]  # small ids: many repeats
    logits = torch.randn(3, V, generator=g) * 3
    return seqs, [4, 5, 3], logits, [SamplingParams(**kw) for _ in seqs]


@pytest.mark.parametrize("penalty", [1.3, 0.7])
def test_repetition_penalty_equals_transformers(penalty):
    seqs, plens, logits, sps = random_case(0, repetition_penalty=penalty)
    reqs, pool = reqs_on_pool(seqs, plens, sps)
    got = apply_controls(logits, SamplingTensors.from_reqs(reqs, V, torch.device("cpu")), pool)
    proc = RepetitionPenaltyLogitsProcessor(penalty)
    want = torch.stack([proc(torch.tensor([s]), logits[i:i + 1].clone())[0] for i, s in enumerate(seqs)])
    torch.testing.assert_close(got, want)


def test_presence_and_frequency_follow_openai_formula():
    seqs, plens, logits, sps = random_case(1, presence_penalty=0.5, frequency_penalty=-0.8)
    reqs, pool = reqs_on_pool(seqs, plens, sps)
    got = apply_controls(logits, SamplingTensors.from_reqs(reqs, V, torch.device("cpu")), pool)
    want = logits.clone()
    for i, (s, n) in enumerate(zip(seqs, plens)):  # only the output counts, not the prompt
        for tok, c in Counter(s[n:]).items():
            want[i, tok] -= c * -0.8 + 0.5
    torch.testing.assert_close(got, want)
    # a wrong twin: counting the prompt too changes the answer, so the test can tell
    wrong = logits.clone()
    for i, s in enumerate(seqs):
        for tok, c in Counter(s).items():
            wrong[i, tok] -= c * -0.8 + 0.5
    assert not torch.allclose(got, wrong)


def test_logit_bias_equals_sequence_bias_and_100_forces():
    bias = ((3, 2.5), (7, -1.0), (9, 100.0))
    seqs, plens, logits, _ = random_case(2)
    reqs, pool = reqs_on_pool(seqs, plens, [SamplingParams(logit_bias=bias)] * 3)
    st = SamplingTensors.from_reqs(reqs, V, torch.device("cpu"))
    got = apply_controls(logits, st, pool)
    proc = SequenceBiasLogitsProcessor({(t,): b for t, b in bias})
    want = proc(torch.tensor([[0]] * 3), logits.clone())
    torch.testing.assert_close(got, want)
    assert sample(got, st).tolist() == [9, 9, 9]  # +100 forces the token


def test_min_tokens_masks_eos_and_stop_ids_like_transformers():
    seqs, plens, logits, _ = random_case(3)
    sp = SamplingParams(min_tokens=4, stop_token_ids=(11,))
    reqs, pool = reqs_on_pool(seqs, plens, [sp] * 3)
    got = apply_controls(logits, SamplingTensors.from_reqs(reqs, V, torch.device("cpu"), eos_token_ids=(2,)), pool)
    for i, (s, n) in enumerate(zip(seqs, plens)):
        proc = MinNewTokensLengthLogitsProcessor(n, 4, eos_token_id=[2, 11])
        torch.testing.assert_close(got[i], proc(torch.tensor([s]), logits[i:i + 1].clone())[0])
    assert torch.isinf(got[0, 2]) and not torch.isinf(got[1, 2])  # 3 outputs: masked; 7 outputs: free


def test_min_p_keeps_what_transformers_keeps():
    seqs, plens, logits, _ = random_case(4)
    sp = SamplingParams(temperature=0.7, min_p=0.2)
    reqs, pool = reqs_on_pool(seqs, plens, [sp] * 3)
    st = SamplingTensors.from_reqs(reqs, V, torch.device("cpu"))
    kept = TemperatureLogitsWarper(0.7)(None, logits.clone())
    kept = MinPLogitsWarper(0.2)(None, kept) > float("-inf")
    g = torch.Generator().manual_seed(0)
    drawn = torch.stack([sample(logits, st, g) for _ in range(300)])  # [draws, B]
    for b in range(3):
        assert kept[b, drawn[:, b].long()].all()  # never a token min_p removes
        assert set(drawn[:, b].tolist()) == set(kept[b].nonzero()[:, 0].tolist()) or kept[b].sum() > 8


def test_penalties_read_the_token_pool_not_the_host_list():
    """With overlap the host list lags one token; the pool is right. A twin fed the host list differs."""
    seqs, plens, logits, sps = random_case(5, frequency_penalty=1.0)
    reqs, pool = reqs_on_pool(seqs, plens, sps)
    st = SamplingTensors.from_reqs(reqs, V, torch.device("cpu"))
    lagging = pool.clone()
    for r in reqs:
        lagging[r.table_idx, r.device_len - 1] = 0  # the in-flight token is not known on the host
    assert not torch.equal(penalise(logits, st.penalties, pool), penalise(logits, st.penalties, lagging))


def test_token_logprobs_are_log_softmax_of_raw_logits():
    logits = torch.randn(4, V)
    tokens = logits.argmax(-1).int()
    lp = token_logprobs(logits, tokens, 3)
    ref = torch.log_softmax(logits, -1)
    torch.testing.assert_close(lp.chosen, ref.max(-1).values)
    torch.testing.assert_close(lp.top_values[:, 0], lp.chosen)  # greedy picks the top logprob
    assert lp.top_ids[:, 0].tolist() == tokens.tolist()


# ---- through the scheduler -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model_dir(str(tmp_path_factory.mktemp("tiny")))


def drive(sched, prompts, sp):
    outs = {}
    reqs = [sched.add_request(i, p, sp) for i, p in enumerate(prompts)]
    while not sched.idle:
        for o in sched.step():
            outs.setdefault(o.uid, []).append(o)
    return reqs, outs


@pytest.mark.usefixtures("one_thread")
def test_penalties_overlap_equals_normal(tiny):
    prompts = [[5, 6, 7, 5, 6], [9, 9, 9], list(range(20, 40))]
    sp = SamplingParams(max_tokens=12, ignore_eos=True, repetition_penalty=1.5, presence_penalty=0.7,
                        frequency_penalty=0.3, logit_bias=((3, 4.0),), min_tokens=2)
    got = {}
    for overlap in (False, True):
        llm = tiny_llm(tiny, overlap=overlap)
        reqs, _ = drive(llm.scheduler, prompts, sp)
        got[overlap] = [r.output_ids for r in reqs]
        llm.scheduler.check_integrity()
    assert got[True] == got[False]
    plain = [r.output_ids for r in drive(tiny_llm(tiny).scheduler, prompts, SamplingParams(max_tokens=12,
                                                                                        ignore_eos=True))[0]]
    assert plain != got[False]  # the controls did something


@pytest.mark.usefixtures("one_thread")
def test_stop_token_ids_finish_with_stop(tiny):
    llm = tiny_llm(tiny)
    free = drive(llm.scheduler, [[1, 2, 3]], SamplingParams(max_tokens=8, ignore_eos=True))[0][0].output_ids
    stop = free[3]
    reqs, outs = drive(llm.scheduler, [[1, 2, 3]], SamplingParams(max_tokens=8, ignore_eos=True,
                                                                  stop_token_ids=(stop,)))
    assert reqs[0].output_ids == free[:free.index(stop) + 1] and outs[0][-1].finish_reason == "stop"


@pytest.fixture(scope="module")
def default_llm(model_path):
    from minisgl_edu import LLM
    return LLM(model_path, device="cpu")


@pytest.fixture(scope="module")
def hf_model(model_path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()


PROMPT = "The list of colours: red, green, blue, red, green,"


@pytest.mark.parametrize("kw,hf_kw", [({"repetition_penalty": 1.4}, {"repetition_penalty": 1.4}),
                                      ({"min_tokens": 6}, {"min_new_tokens": 6})])
def test_greedy_with_control_equals_transformers_generate(default_llm, hf_model, tokenizer, kw, hf_kw):
    ids = tokenizer.encode(PROMPT)
    reqs, _ = drive(default_llm.scheduler, [ids], SamplingParams(max_tokens=10, **kw))
    x = torch.tensor([ids])
    with torch.no_grad():
        want = hf_model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=10, do_sample=False,
                                 pad_token_id=hf_model.config.eos_token_id, **hf_kw)[0, len(ids):].tolist()
    assert reqs[0].output_ids == want


def test_logprobs_equal_transformers_log_softmax(default_llm, hf_model, tokenizer):
    ids = tokenizer.encode(PROMPT)
    reqs, outs = drive(default_llm.scheduler, [ids], SamplingParams(max_tokens=6, temperature=0.8, seed=3,
                                                                    logprobs=5))
    out = reqs[0].output_ids
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids + out])).logits[0, len(ids) - 1:-1].float()
    ref = torch.log_softmax(logits, -1)
    for step, o in enumerate(outs[0]):
        chosen, top_ids, top_vals = o.logprobs
        assert abs(chosen - ref[step, out[step]].item()) < 1e-4
        assert top_ids == ref[step].topk(5).indices.tolist()
        torch.testing.assert_close(torch.tensor(top_vals), ref[step].topk(5).values, atol=1e-4, rtol=0)
