"""The offline API: bad input is refused with a clear ValueError (and leaves nothing queued), long
outputs are clamped to the context with a warning, and sampling is per request and seeded."""
from __future__ import annotations

import pytest

from minisgl_edu import SamplingParams
from tiny_model import one_thread, tiny_llm, tiny_model_dir  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")
CTX = 256
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tmp_path_factory, model_path):
    """Random weights, the default model's tokenizer (vocab 49152), a 256-token context."""
    from transformers import AutoConfig
    vocab = AutoConfig.from_pretrained(model_path).vocab_size
    path = tiny_model_dir(str(tmp_path_factory.mktemp("tiny")), vocab=vocab, max_positions=CTX, tokenizer_from=model_path)
    return tiny_llm(path)


def assert_nothing_queued(llm):
    s = llm.scheduler
    assert s.idle and not s.live
    assert sorted(llm.engine.pool.free_rows) == list(range(llm.engine.pool.dummy_row))
    s.check_integrity()


@pytest.mark.parametrize("prompt,sp,match", [
    ("", GREEDY, "empty"),
    ([], GREEDY, "empty"),
    (list(range(CTX)), GREEDY, "context"),
    (list(range(CTX + 50)), GREEDY, "context"),
    ("hello", SamplingParams(max_tokens=0), "max_tokens"),
    ("hello", SamplingParams(max_tokens=-5), "max_tokens"),
    ("hello", SamplingParams(temperature=-0.5), "temperature"),
    ("hello", SamplingParams(top_p=0.0), "top_p"),
    ("hello", SamplingParams(top_p=1.01), "top_p"),
    ("hello", SamplingParams(top_k=0), "top_k"),
    ("hello", SamplingParams(top_k=-7), "top_k"),
    ([1, 2, 10**6], GREEDY, "token ids"),
    (3.5, GREEDY, "prompt"),
], ids=["empty-str", "empty-ids", "len=ctx", "len>ctx", "max_tokens=0", "max_tokens<0", "temp<0",
        "top_p=0", "top_p>1", "top_k=0", "top_k<-1", "bad-id", "not-a-prompt"])
def test_bad_input_raises_and_leaves_llm_usable(llm, prompt, sp, match):
    want = llm.generate(["A fine prompt"], GREEDY, use_tqdm=False)[0]["token_ids"]
    with pytest.raises(ValueError, match=match):
        llm.generate(["A fine prompt", prompt, "another fine one"], [GREEDY, sp, GREEDY], use_tqdm=False)
    assert_nothing_queued(llm)  # the good prompt before the bad one was withdrawn
    assert llm.generate(["A fine prompt"], GREEDY, use_tqdm=False)[0]["token_ids"] == want


def test_mismatched_params_list(llm):
    with pytest.raises(ValueError, match="sampling params"):
        llm.generate(["a", "b"], [GREEDY], use_tqdm=False)
    assert_nothing_queued(llm)


def test_max_tokens_overflowing_context_is_clamped(llm):
    prompt = [1] * (CTX - 5)
    with pytest.warns(UserWarning, match="max_tokens cut to 5"):
        out = llm.generate([prompt], SamplingParams(max_tokens=100, ignore_eos=True), use_tqdm=False)[0]
    assert len(out["token_ids"]) == 5 and out["finish_reason"] == "length"
    assert_nothing_queued(llm)


def test_raw_and_chat_prompts(llm):
    raw = llm.encode("Hi", chat=False)
    chat = llm.encode("Hi", chat=True)
    assert raw == llm.tokenizer.encode("Hi") and len(chat) > len(raw)
    assert llm.tokenizer.decode(chat).count("Hi") == 1
    by_text = llm.generate("Hi", GREEDY, use_tqdm=False)[0]
    by_ids = llm.generate([raw], GREEDY, use_tqdm=False)[0]
    assert by_text["token_ids"] == by_ids["token_ids"] and by_text["text"] == llm.decode(by_ids["token_ids"])


def test_top_k_1_and_tiny_top_p_equal_greedy(llm):
    prompts = ["The sea", "Once upon a time there was", "1, 2, 3,"]
    greedy = [o["token_ids"] for o in llm.generate(prompts, GREEDY, use_tqdm=False)]
    for sp in (SamplingParams(temperature=1.5, top_k=1, max_tokens=8, ignore_eos=True),
               SamplingParams(temperature=1.5, top_p=1e-6, max_tokens=8, ignore_eos=True)):
        assert [o["token_ids"] for o in llm.generate(prompts, sp, use_tqdm=False)] == greedy


def test_temperature_samples_valid_ids_not_greedy(llm):
    greedy = llm.generate(["The sea"], SamplingParams(max_tokens=16, ignore_eos=True), use_tqdm=False)[0]["token_ids"]
    out = llm.generate(["The sea"], SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True), use_tqdm=False)[0]
    ids = out["token_ids"]
    assert len(ids) == 16 and all(0 <= t < llm.engine.vocab_size for t in ids)
    assert ids != greedy  # random weights: the distribution is nearly flat, sampling must differ


def test_seeded_sampling_ignores_batch_composition(llm):
    a = SamplingParams(temperature=0.8, top_p=0.9, seed=1234, max_tokens=12, ignore_eos=True)
    alone = llm.generate(["The sea"], a, use_tqdm=False)[0]["token_ids"]
    others = [SamplingParams(temperature=1.0, seed=7, max_tokens=5, ignore_eos=True), GREEDY,
              SamplingParams(temperature=2.0, top_k=50, max_tokens=20, ignore_eos=True)]
    batch = llm.generate(["A much longer prompt that comes first in the batch", "The sea", "x", "y z"],
                         [others[0], a, others[1], others[2]], use_tqdm=False)
    assert batch[1]["token_ids"] == alone
    other_seed = SamplingParams(temperature=0.8, top_p=0.9, seed=4321, max_tokens=12, ignore_eos=True)
    assert llm.generate(["The sea"], other_seed, use_tqdm=False)[0]["token_ids"] != alone
