"""Chapter 3 — Prefill budget and chunked prefill: the five admission conditions, the token budget,
and a chunked request that is never sampled before its last chunk."""
from __future__ import annotations

import random

import pytest
import torch

from minisgl_edu import SamplingParams
from minisgl_edu.paging import PagePool
from minisgl_edu.prefill import PrefillAdder, pages_to_finish
from minisgl_edu.radix import RadixCache
from minisgl_edu.req import Req
from tiny_model import one_thread, tiny_llm, tiny_model_dir  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def setup(num_pages=64, ps=1, rows=4):
    pool = PagePool(num_pages, ps, max_running_reqs=rows, max_seq_len=512, device=torch.device("cpu"))
    cache = RadixCache(ps)
    pool.evict_fn = cache.evict
    return pool, cache


def req(uid, n, max_tokens=4, start=0):
    return Req(uid, list(range(start, start + n)), SamplingParams(max_tokens=max_tokens))


def cache_prefix(pool, cache, tokens):
    """Put `tokens` into the cache on pages taken from the pool, as a finished request would."""
    slots = (pool.take_pages(len(tokens) // pool.page_size)[:, None] * pool.page_size
             + torch.arange(pool.page_size)).flatten().to(torch.int32)
    cache.insert_prefix(tokens, slots)
    return slots


def test_pages_to_finish():
    r = req(0, 10, max_tokens=7)  # max_device_len 17
    assert pages_to_finish(r, 1) == 17 and pages_to_finish(r, 4) == 5
    r.cached_len = 6
    assert pages_to_finish(r, 4) == 5 - 2 and pages_to_finish(r, 1) == 11


def test_admits_and_takes_a_row():
    pool, cache = setup()
    adder = PrefillAdder(100, 0, pool, cache)
    a = req(0, 10)
    assert adder.try_add(a) and adder.added == [a]
    assert a.table_idx >= 0 and (a.cached_len, a.device_len) == (0, 10)
    assert adder.token_budget == 90 and adder.reserved_pages == 14
    assert pool.token_pool[a.table_idx, :10].tolist() == a.token_ids


def test_condition_1_no_free_row():
    pool, cache = setup(rows=1)
    adder = PrefillAdder(100, 0, pool, cache)
    assert adder.try_add(req(0, 5))
    assert not adder.try_add(req(1, 5)) and adder.log[-1].startswith("1:")


def test_condition_2_budget_spent():
    pool, cache = setup()
    adder = PrefillAdder(8, 0, pool, cache)
    a, b = req(0, 8), req(1, 3)
    assert adder.try_add(a) and adder.token_budget == 0
    assert not adder.try_add(b) and adder.log[-1].startswith("2:") and b.table_idx == -1


def test_condition_3_reserved_size():
    pool, cache = setup(num_pages=20)
    assert PrefillAdder(100, 6, pool, cache).try_add(req(0, 10, 4))  # 14 + 6 reserved == 20 fits
    pool, cache = setup(num_pages=20)
    adder = PrefillAdder(100, 7, pool, cache)  # 14 + 7 reserved > 20
    r = req(0, 10, 4)
    assert not adder.try_add(r) and adder.log[-1].startswith("3:")
    assert r.table_idx == -1 and r.cached_len == 0 and len(pool.free_rows) == 4


def test_condition_3_counts_evictable_pages():
    pool, cache = setup(num_pages=20)
    cache_prefix(pool, cache, list(range(100, 112)))  # 12 pages now sit in the cache, unlocked
    assert pool.num_free_pages == 8
    adder = PrefillAdder(100, 0, pool, cache)
    assert adder.available_pages() == 20
    assert adder.try_add(req(0, 10, 4))  # 14 > 8 free, but eviction can supply the rest


def test_condition_4_prefix_is_locked():
    pool, cache = setup(ps=4)
    slots = cache_prefix(pool, cache, list(range(12)))
    adder = PrefillAdder(100, 0, pool, cache)
    r = req(0, 15)  # shares 12 tokens (3 pages) with the cache
    assert adder.try_add(r)
    assert r.matched_len == r.cached_len == 12 and r.device_len == 15 and r.extend_len == 3
    assert cache.protected_size == 12 and cache.evictable_size == 0 and r.cache_handle.ref_count == 1
    assert torch.equal(pool.page_table[r.table_idx, :12], slots)  # the table row starts with the cached slots
    assert adder.token_budget == 97  # only the extension costs budget


def test_matched_prefix_leaves_the_last_token_to_compute():
    pool, cache = setup(ps=4)
    cache_prefix(pool, cache, list(range(12)))
    r = req(0, 12)  # the whole prompt is cached, but its last token's logits are needed
    assert PrefillAdder(100, 0, pool, cache).try_add(r)
    assert r.cached_len == 8 and r.device_len == 12  # back off one whole page


def test_condition_5_recheck_after_lock():
    pool, cache = setup(num_pages=10)
    cache_prefix(pool, cache, list(range(6)))  # 4 free + 6 evictable
    r = req(0, 8, max_tokens=2)  # matches 6, needs 10 - 6 = 4 more pages
    adder = PrefillAdder(100, 1, pool, cache)
    # before the lock: 4 + 1 <= 4 free + 6 evictable; after: the 6 are protected and 5 > 4
    assert not adder.try_add(r) and adder.log[-1].startswith("5:")
    assert cache.protected_size == 0 and cache.evictable_size == 6  # the lock was undone
    assert r.table_idx == -1 and r.cached_len == 0 and len(pool.free_rows) == 4
    assert PrefillAdder(100, 0, pool, cache).try_add(r)  # without the reservation it fits


@pytest.mark.parametrize("seed", range(5))
def test_chunks_never_exceed_the_token_budget(seed):
    rng = random.Random(seed)
    pool, cache = setup(num_pages=4096, rows=8)
    budget = rng.randint(1, 40)
    pending = [req(i, rng.randint(1, 120), start=1000 * i) for i in range(8)]
    total, steps = sum(r.prompt_len for r in pending), 0
    while pending:
        adder = PrefillAdder(budget, 0, pool, cache)
        for r in pending:
            if not adder.try_add(r):
                break
        assert adder.added, adder.log
        assert 0 < sum(r.extend_len for r in adder.added) <= budget
        assert all(not r.is_chunked for r in adder.added[:-1])  # only the last admitted may be a chunk
        pool.assign_locations(adder.added)
        for r in adder.added:
            r.cached_len = r.device_len  # this step computed the chunk
            if not r.is_chunked:
                pending.remove(r)
        steps += 1
    assert steps >= -(-total // budget)  # the budget really bounded every step


def test_chunked_request_is_sampled_only_after_its_last_chunk(tmp_path):
    path = tiny_model_dir(str(tmp_path))
    rng = random.Random(0)
    prompts = [[rng.randrange(97) for _ in range(n)] for n in (70, 5, 33, 12, 90)]
    sp = SamplingParams(max_tokens=6, ignore_eos=True)
    whole = tiny_llm(path).generate(prompts, sp, use_tqdm=False)
    llm = tiny_llm(path, max_prefill_tokens=16)
    seen = []  # (phase, [(uid, is_chunked, sampled)])
    forward = llm.engine.forward

    def spy(batch):
        tokens = forward(batch)
        sampled = set(batch.sample_rows)
        seen.append((batch.phase, [(r.uid, r.is_chunked, i in sampled) for i, r in enumerate(batch.reqs)]))
        assert len(tokens) == len(sampled)
        return tokens

    llm.engine.forward = spy
    chunked = llm.generate(prompts, sp, use_tqdm=False)
    assert [o["token_ids"] for o in chunked] == [o["token_ids"] for o in whole]  # chunking changes nothing
    assert all(s.tokens <= 16 for s in llm.scheduler.stats if s.phase == "prefill")
    assert sum(s.phase == "prefill" for s in llm.scheduler.stats) >= sum(map(len, prompts)) // 16
    finished_prefill = set()
    for phase, rows in seen:
        for uid, is_chunked, sampled in rows:
            assert sampled == (not is_chunked)  # a chunk is never sampled; the last chunk is
            assert not (phase == "decode" and uid not in finished_prefill)  # no decode before the last chunk
            if phase == "prefill" and not is_chunked:
                finished_prefill.add(uid)
    assert any(is_chunked for _, rows in seen for _, is_chunked, _ in rows)
    llm.scheduler.check_integrity()


def test_reserved_pages_is_the_sum_of_pages_to_finish():
    """The scheduler's inlined reserved size equals pages_to_finish summed, for every page size; the first
    inlining tried (floor of cached_len where pages_to_finish takes its ceiling) is caught."""
    import random
    from types import SimpleNamespace

    from minisgl_edu.prefill import pages_to_finish, reserved_pages
    rnd = random.Random(0)
    wrong = lambda reqs, ps: sum((r.cached_len // ps) - (r.max_device_len // -ps) for r in reqs)
    for ps in (1, 2, 4, 16):
        reqs = [SimpleNamespace(cached_len=c, max_device_len=c + rnd.randint(1, 500))
                for c in (rnd.randint(0, 500) for _ in range(50))]
        want = sum(pages_to_finish(r, ps) for r in reqs)
        assert reserved_pages(reqs, ps) == want
        if ps > 1:
            assert wrong(reqs, ps) != want
    assert reserved_pages([], 4) == 0
