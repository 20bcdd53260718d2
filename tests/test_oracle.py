"""The correctness oracle: greedy decoding through the engine is token-identical to transformers."""
from __future__ import annotations

import pytest

from minisgl_edu import LLM, SamplingParams

N = 16


@pytest.fixture(scope="module", autouse=True)
def one_weight_load():
    """Every LLM below differs from the others in its KV pool, cache and scheduler, never in its weights:
    the first one loads them through the real loader, the others reuse that model (saves ~5 s each)."""
    import minisgl_edu.engine as engine
    real, built = engine.build_model, {}

    def build(mc, device, dtype, max_positions, path=None, dummy_weights=False, seed=0):
        key = (path, str(device), dtype, max_positions, dummy_weights, seed)
        if key not in built:
            built[key] = real(mc, device, dtype, max_positions, path, dummy_weights, seed)
        return built[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "build_model", build)
        yield built
    assert len(built) == 1, "one set of weights served every configuration"


@pytest.mark.parametrize("kw", [
    dict(page_size=1),
    dict(page_size=16),
    dict(page_size=1, cache="naive"),
    dict(page_size=16, cache="naive"),
    dict(page_size=1, max_prefill_tokens=32),
    dict(page_size=16, max_prefill_tokens=32),
    dict(page_size=4, max_prefill_tokens=32, overlap=True),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_token_identical_to_transformers(kw, model_path, prompts, hf_greedy):
    llm = LLM(model_path, device="cpu", **kw)
    outs = llm.generate(prompts, SamplingParams(max_tokens=N), use_tqdm=False)
    for ids, out in zip(prompts, outs):
        assert out["token_ids"] == hf_greedy(ids, N)[: len(out["token_ids"])]
        assert len(out["token_ids"]) == N or out["finish_reason"] == "stop"
    if kw.get("max_prefill_tokens") == 32:  # most prompts were chunked
        assert sum(s.phase == "prefill" for s in llm.scheduler.stats) > len(prompts)
    llm.scheduler.check_integrity()
    assert llm.scheduler.pool.num_free_pages + llm.scheduler.cache.size // llm.engine.pool.page_size \
        == llm.engine.pool.num_pages


@pytest.mark.parametrize("cache,page_size", [("radix", 1), ("radix", 16)])
def test_second_wave_hits_radix_cache(cache, page_size, model_path, tokenizer, hf_greedy):
    from prompts import LOREM
    shared = tokenizer.encode(LOREM * 5)  # a long shared prefix (~180 tokens)
    tails = ["Question one:", "A second, different question:", "Third:"]
    wave = [shared + tokenizer.encode(t) for t in tails]
    llm = LLM(model_path, device="cpu", page_size=page_size, cache=cache, max_prefill_tokens=64)
    first = llm.generate(wave[:1], SamplingParams(max_tokens=N), use_tqdm=False)
    n_stats = len(llm.scheduler.stats)
    second = llm.generate(wave[1:], SamplingParams(max_tokens=N), use_tqdm=False)
    hits = sum(s.cache_hit_tokens for s in llm.scheduler.stats[n_stats:])
    assert hits >= (len(shared) // page_size * page_size - page_size) * 2, hits  # both reused the prefix
    for ids, out in zip(wave, first + second):
        assert out["token_ids"] == hf_greedy(ids, N)[: len(out["token_ids"])]
    llm.scheduler.check_integrity()
